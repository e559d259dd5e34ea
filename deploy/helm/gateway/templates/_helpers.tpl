{{/* Names and labels shared by every object of the chart. */}}

{{- define "gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The metadata of one object: its name, the chart's labels, its component's,
its own, and commonAnnotations with its own annotations. Pass (dict "root" $
"name" "…" "component" "data-plane" "labels" (dict) "annotations" (dict));
component, labels and annotations are optional.
*/}}
{{- define "gateway.metadata" -}}
name: {{ .name }}
labels:
  {{- include "gateway.labels" .root | nindent 2 }}
  {{- with .component }}
  app.kubernetes.io/component: {{ . }}
  {{- end }}
  {{- with .labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $annotations := merge (dict) (.annotations | default dict) (.root.Values.commonAnnotations | default dict) }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
One probe: the values' when given (non-empty), else the chart's default.
Pass (dict "given" $values.probes.readiness "default" (dict …)).
*/}}
{{- define "gateway.probe" -}}
{{- toYaml (ternary .given .default (not (empty .given))) -}}
{{- end -}}

{{/* Selector labels of one plane: pass (dict "root" $ "component" "data-plane"). */}}
{{- define "gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret holding admin.key and node.key. */}}
{{- define "gateway.keysSecret" -}}
{{- .Values.keys.existingSecret | default (printf "%s-keys" (include "gateway.fullname" .)) -}}
{{- end -}}

{{- define "gateway.masterKeySecret" -}}
{{- .Values.masterKey.existingSecret | default (printf "%s-master-key" (include "gateway.fullname" .)) -}}
{{- end -}}

{{- define "gateway.tlsSecret" -}}
{{- .Values.tls.existingSecret | default (printf "%s-tls" (include "gateway.fullname" .)) -}}
{{- end -}}

{{- define "gateway.controlPlaneAddress" -}}
{{- printf "%s://%s-control-plane:%d" (ternary "https" "http" .Values.tls.enabled) (include "gateway.fullname" .) (int .Values.controlPlane.service.grpcPort) -}}
{{- end -}}

{{/* OTEL_* variables of one plane: pass (dict "root" $ "component" "data-plane"). */}}
{{- define "gateway.otelEnv" -}}
{{- with .root.Values.otel }}
{{- if .endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .protocol | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
{{- if .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | quote }}
{{- end }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ printf "k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),service.instance.id=$(POD_NAME)%s" (ternary (printf ",%s" .resourceAttributes) "" (ne .resourceAttributes "")) | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Where a plane's pods may run, from its values: pass the plane's values. */}}
{{- define "gateway.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
