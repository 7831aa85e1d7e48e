"""A pod process for tests: list ConfigMaps in its namespace as its ServiceAccount and
write the HTTP status (200 or the API error's) to the termination message."""

import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config()
try:
    client.CoreV1Api().list_namespaced_config_map(os.environ["POD_NAMESPACE"])
    status = 200
except ApiException as e:
    status = e.status
Path(os.environ["TERMINATION_MESSAGE_PATH"]).write_text(str(status))
