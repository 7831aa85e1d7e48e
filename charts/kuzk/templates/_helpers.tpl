{{/* Standard labels, from one place. Selectors use only name and instance (immutable). */}}
{{- define "kuzk.selectorLabels" -}}
app.kubernetes.io/name: kuzk-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kuzk.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kuzk
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kuzk.labels" -}}
{{ include "kuzk.selectorLabels" . }}
{{ include "kuzk.commonLabels" . }}
{{- end }}

{{- define "kuzk.statusSelectorLabels" -}}
app.kubernetes.io/name: kuzk-status-server
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kuzk.statusLabels" -}}
{{ include "kuzk.statusSelectorLabels" . }}
{{ include "kuzk.commonLabels" . }}
{{- end }}

{{- define "kuzk.statusName" -}}
{{ include "kuzk.fullname" . }}-status
{{- end }}

{{/* Where Prometheus finds the status server's metrics (pods and Service carry them). */}}
{{- define "kuzk.scrapeAnnotations" -}}
{{- if .Values.metrics.annotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.statusServer.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{- define "kuzk.fullname" -}}
{{- printf "%s-kuzk" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The ConfigMap where the operator keeps what deleted objects counted (kuzk.ledger). */}}
{{- define "kuzk.ledgerName" -}}
{{ include "kuzk.fullname" . | trunc 56 | trimSuffix "-" }}-ledger
{{- end }}

{{- define "kuzk.proverRole" -}}
{{ include "kuzk.fullname" . }}-prover
{{- end }}

{{- define "kuzk.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Namespaces that run partition pods. */}}
{{- define "kuzk.proverNamespaces" -}}
{{- $ns := .Values.prover.namespaces | default .Values.operator.watchNamespaces -}}
{{- if not $ns }}{{- $ns = list .Release.Namespace }}{{- end -}}
{{ toJson $ns }}
{{- end }}

{{- define "kuzk.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "kuzk.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* What a ProofJob may choose: the allowlists, with their defaults. */}}
{{- define "kuzk.allowedImages" -}}
{{ toJson (.Values.prover.allowedImages | default (list .Values.prover.image)) }}
{{- end }}

{{- define "kuzk.allowedPriorityClasses" -}}
{{ toJson (.Values.prover.allowedPriorityClasses | default (list "kuzk-critical" "kuzk-high" "kuzk-normal")) }}
{{- end }}
