{{- define "browserpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "browserpool.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "browserpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "browserpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "browserpool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "browserpool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "browserpool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "browserpool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Whether more than one pod can run at once: several replicas or an autoscaler. */}}
{{- define "browserpool.multiReplica" -}}
{{- if or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled .Values.keda.enabled }}true{{ end }}
{{- end }}

{{/* Render-time checks: fail with a message instead of a broken deployment. */}}
{{- define "browserpool.validate" -}}
{{- if include "browserpool.multiReplica" . }}
{{- if not .Values.database.existingSecret }}
{{- fail "replicaCount > 1 (or autoscaling) needs PostgreSQL: SQLite lives in each pod's own emptyDir. Set database.existingSecret to a Secret holding the postgres:// URL (key database.secretKey)." }}
{{- end }}
{{- if not .Values.signingKeys.existingSecret }}
{{- fail "replicaCount > 1 (or autoscaling) needs shared signing keys: set signingKeys.existingSecret (see values.yaml), or each replica refuses the others' tokens." }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled .Values.keda.enabled }}
{{- fail "autoscaling.enabled and keda.enabled both make an HPA for the Deployment: choose one." }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled needs tls.existingSecret: a Secret with tls.crt and tls.key (and ca.crt for tls.clientCA)." }}
{{- end }}
{{- if and .Values.tls.clientCA (not .Values.tls.enabled) }}
{{- fail "tls.clientCA needs tls.enabled." }}
{{- end }}
{{- end }}

{{- define "browserpool.scheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* Memory and CPU from the per-worker arithmetic in values.yaml, unless resources is set. */}}
{{- define "browserpool.resources" -}}
{{- if .Values.resources }}
{{- toYaml .Values.resources }}
{{- else }}
{{- $s := .Values.sizing }}
{{- $workers := int .Values.server.maxWorkers }}
{{- $mem := add (mul $workers (int $s.memoryPerWorkerMi)) (int $s.serverMemoryMi) }}
{{- $cpu := add (mul $workers (int $s.cpuPerWorkerMilli)) (int $s.serverCpuMilli) }}
requests:
  cpu: {{ printf "%dm" $cpu }}
  memory: {{ printf "%dMi" $mem }}
limits:
  memory: {{ printf "%dMi" $mem }}
{{- end }}
{{- end }}

{{/* A host for host:port: IPv6 literals in brackets. */}}
{{- define "browserpool.hostPort" -}}
{{- if contains ":" . }}{{ printf "[%s]" . }}{{ else }}{{ . }}{{ end }}
{{- end }}
