{{/* The operator's name: Deployment, ServiceAccount, ClusterRole(s), bindings, peering object. */}}
{{- define "orbitmq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (.Values.nameOverride | default "operator") | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "orbitmq.selectorLabels" -}}
app.kubernetes.io/name: orbitmq-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "orbitmq.labels" -}}
{{ include "orbitmq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "orbitmq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "orbitmq.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "orbitmq.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when the prometheus-operator's objects are rendered. */}}
{{- define "orbitmq.monitoring" -}}
{{- $m := .Values.monitoring.enabled -}}
{{- if eq (toString $m) "auto" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- else if $m -}}
true
{{- end -}}
{{- end -}}

{{/* The resource name of a topic or group item: its `name`, else its orbitmq name lower-cased. */}}
{{- define "orbitmq.resourceName" -}}
{{- .item.name | default (printf "%s-%s" .cluster (index .item .key | lower | replace "_" "-" | replace "%" "-" | replace "|" "-")) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "orbitmq.namesrv" -}}
{{- printf "%s-namesrv.%s.svc:9876" .Values.cluster.name .Release.Namespace -}}
{{- end -}}
