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
{{ include "kuzk.suffixed" (list . "status") }}
{{- end }}

{{/* Where Prometheus finds a pod's metrics (on the pods only: discovery of pods and of
endpoints would otherwise scrape each replica twice). Call with (list $ port). */}}
{{- define "kuzk.scrapeAnnotations" -}}
{{- if (index . 0).Values.metrics.annotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ index . 1 | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{/* The chart's name: nameOverride, or the chart's own. */}}
{{- define "kuzk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What every object's name starts with, as `helm create` makes it: fullnameOverride, or the
release name where it contains the chart's name already (release kuzk: kuzk-operator), or
<release>-<name> (release kz: kz-kuzk-operator). */}}
{{- define "kuzk.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if and (contains $name .Release.Name) (not (include "kuzk.namedByOldChart" .)) }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Non-empty for a release that a chart before the naming rule above named <release>-kuzk:
it keeps those names on upgrade (else its ledger and peering would change under it). Found
by its operator's Deployment, made by this release; asked only of a release whose name the
rule would shorten. */}}
{{- define "kuzk.namedByOldChart" -}}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- $old := lookup "apps/v1" "Deployment" .Release.Namespace (printf "%s-%s-operator" .Release.Name $name) }}
{{- if and $old (eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $old) .Release.Name) }}true{{ end }}
{{- end }}

{{/* The fullname plus a suffix, at most 63 characters with the whole suffix kept: the fullname
gives way. Call with (list $ "operator"). */}}
{{- define "kuzk.suffixed" -}}
{{- $suffix := index . 1 }}
{{- $room := sub 62 (len $suffix) | int }}
{{- $base := regexReplaceAll "[-.]+$" (include "kuzk.fullname" (index . 0) | trunc $room) "" }}
{{- printf "%s-%s" $base $suffix }}
{{- end }}

{{/* The ConfigMap where the operator keeps what deleted objects counted (kuzk.ledger). */}}
{{- define "kuzk.ledgerName" -}}
{{ include "kuzk.suffixed" (list . "ledger") }}
{{- end }}

{{- define "kuzk.proverRole" -}}
{{ include "kuzk.suffixed" (list . "prover") }}
{{- end }}

{{- define "kuzk.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The operator's shards, as a JSON list of {name, suffix, peering, namespaces}: each one
operator Deployment (suffix: its objects' name after the fullname) with its own Kopf peering,
handling the ProofJobs of its namespaces. Without operator.shards, one unnamed shard over
operator.watchNamespaces (empty: every namespace), named as before shards existed. Refused
here: shards beside watchNamespaces, a shard name twice, a namespace in two shards, and a
prover namespace no shard handles (its ProofJobs would be nobody's). */}}
{{- define "kuzk.shards" -}}
{{- $o := .Values.operator }}
{{- $fullname := include "kuzk.fullname" . }}
{{- if not $o.shards }}
{{- toJson (list (dict "name" "" "suffix" "operator" "peering" $fullname
    "namespaces" $o.watchNamespaces)) }}
{{- else }}
{{- if $o.watchNamespaces }}
{{- fail "operator.shards and operator.watchNamespaces are both set: with shards, name each shard's namespaces in operator.shards[].namespaces and leave watchNamespaces empty" }}
{{- end }}
{{- $out := list }}
{{- $owner := dict }}
{{- range $o.shards }}
{{- $shard := . }}
{{- if hasKey $owner (printf "shard:%s" $shard.name) }}
{{- fail (printf "operator.shards: the name %q is given to two shards; each shard needs a name of its own" $shard.name) }}
{{- end }}
{{- $_ := set $owner (printf "shard:%s" $shard.name) $shard.name }}
{{- range $ns := $shard.namespaces }}
{{- with get $owner (printf "ns:%s" $ns) }}
{{- fail (printf "operator.shards: namespace %q is in shards %q and %q; a namespace belongs to one shard, or two operators would handle its ProofJobs" $ns . $shard.name) }}
{{- end }}
{{- $_ := set $owner (printf "ns:%s" $ns) $shard.name }}
{{- end }}
{{- $out = append $out (dict "name" $shard.name "suffix" (printf "operator-%s" $shard.name)
    "peering" (printf "%s-%s" $fullname $shard.name) "namespaces" $shard.namespaces) }}
{{- end }}
{{- range .Values.prover.namespaces }}
{{- if not (hasKey $owner (printf "ns:%s" .)) }}
{{- fail (printf "prover.namespaces: namespace %q is in no operator shard, so its ProofJobs would be handled by none; add it to one of operator.shards[].namespaces" .) }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}
{{- end }}

{{/* The namespaces the release's operators handle, every shard's (a JSON list; empty: every
namespace): the status server reads them, the uninstall hook releases them, the admission
policy guards them. */}}
{{- define "kuzk.watchNamespaces" -}}
{{- $ns := list }}
{{- range include "kuzk.shards" . | fromJsonArray }}
{{- $ns = concat $ns .namespaces }}
{{- end }}
{{- toJson $ns }}
{{- end }}

{{/* A shard's selector labels: the operator's, and for a named shard its name (call with
(list $ shard)); the unnamed one keeps the operator's alone, as before shards existed. */}}
{{- define "kuzk.shardSelectorLabels" -}}
{{ include "kuzk.selectorLabels" (index . 0) }}
{{- with (index . 1).name }}
kuzk.io/shard: {{ . | quote }}
{{- end }}
{{- end }}

{{/* Namespaces that run partition pods. */}}
{{- define "kuzk.proverNamespaces" -}}
{{- $ns := .Values.prover.namespaces | default (include "kuzk.watchNamespaces" . | fromJsonArray) -}}
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

{{/* The Secrets partition pods pull the prover image with: the release's imagePullSecrets,
then prover.imagePullSecrets, each name once (a JSON list of names). */}}
{{- define "kuzk.proverPullSecrets" -}}
{{- $names := list }}
{{- range concat .Values.imagePullSecrets .Values.prover.imagePullSecrets }}
{{- $names = append $names .name }}
{{- end }}
{{- toJson ($names | uniq) }}
{{- end }}

{{- define "kuzk.allowedPriorityClasses" -}}
{{ toJson (.Values.prover.allowedPriorityClasses | default (list "kuzk-critical" "kuzk-high" "kuzk-normal")) }}
{{- end }}

{{/* A pod template's labels or annotations: the chart's (first argument, YAML), then the ones
from values (second: podLabels, podAnnotations), which cannot replace them. */}}
{{- define "kuzk.merged" -}}
{{- if index . 1 }}
{{- merge (index . 0 | fromYaml) (index . 1) | toYaml }}
{{- else }}
{{- index . 0 }}
{{- end }}
{{- end }}

{{/* topologySpreadConstraints (second argument), where one without a labelSelector gets the
Deployment's selector labels (first argument, YAML). */}}
{{- define "kuzk.topologySpread" -}}
{{- $selector := index . 0 | fromYaml }}
{{- $out := list }}
{{- range index . 1 }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* The scheduling fields of a pod spec, from a values block (operator or statusServer), with
the Deployment's selector labels (YAML) for topology spread constraints that name none. */}}
{{- define "kuzk.scheduling" -}}
{{- $v := index . 0 }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints: {{- include "kuzk.topologySpread" (list (index $ 1) .) | nindent 2 }}
{{- end }}
{{- end }}

{{/* A PodDisruptionBudget: (list podDisruptionBudget-values name selector-labels-YAML
labels-YAML values-path). minAvailable or maxUnavailable, whichever is set; neither:
maxUnavailable 1. */}}
{{- define "kuzk.podDisruptionBudget" -}}
{{- $pdb := index . 0 }}
{{- $path := index . 4 }}
{{- $min := $pdb.minAvailable }}
{{- $max := $pdb.maxUnavailable }}
{{- $hasMin := and (not (kindIs "invalid" $min)) (ne (toString $min) "") }}
{{- $hasMax := and (not (kindIs "invalid" $max)) (ne (toString $max) "") }}
{{- if and $hasMin $hasMax }}
{{- fail (printf "%s: set minAvailable or maxUnavailable, not both" $path) }}
{{- end }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ index . 1 }}
  labels: {{- index . 3 | nindent 4 }}
spec:
  {{- if $hasMin }}
  minAvailable: {{ $min }}
  {{- else }}
  maxUnavailable: {{ ternary $max 1 $hasMax }}
  {{- end }}
  selector:
    matchLabels: {{- index . 2 | nindent 6 }}
{{- end }}
