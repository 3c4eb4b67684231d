{{/* The release's name prefix of every object: <release> or <release>-capstan, at most 63 characters. */}}
{{- define "capstan.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects: <fullname>-<component>. Call with (dict "root" $ "component" "record"). */}}
{{- define "capstan.componentName" -}}
{{- printf "%s-%s" (include "capstan.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "capstan.labels" -}}
{{ include "capstan.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "capstan.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The pod spec parts both components share: security, placement, image pull Secrets. */}}
{{- define "capstan.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Environment every component's container has: its pod's name (the leader election's identity) and the store:
the PostgreSQL URL from its Secret, or the SQLite file on the recorder's volume. */}}
{{- define "capstan.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
{{- if .Values.store.existingSecret }}
- name: CAPSTAN_HISTORY_STORE
  valueFrom:
    secretKeyRef:
      name: {{ .Values.store.existingSecret }}
      key: {{ .Values.store.key }}
{{- else }}
- name: CAPSTAN_HISTORY_STORE
  value: /var/lib/capstan/history.db
{{- end }}
{{- end -}}

{{/* What the SQLite store cannot do, said at install time rather than as pods that cannot share a volume. */}}
{{- define "capstan.checkStore" -}}
{{- if not .Values.store.existingSecret }}
{{- if .Values.restarts.enabled }}
{{- fail "restarts.enabled: the notifier needs the PostgreSQL store the recorder writes (set store.existingSecret); the SQLite store is one pod's volume" }}
{{- end }}
{{- if and .Values.mcp.enabled .Values.mcp.history }}
{{- fail "mcp.history: the MCP server reads history from the PostgreSQL store (set store.existingSecret), or set mcp.history=false" }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The recorder's replicas: one with SQLite (one writer, a ReadWriteOnce volume). */}}
{{- define "capstan.recordReplicas" -}}
{{- if .Values.store.existingSecret }}{{ .Values.record.replicas }}{{ else }}{{ min 1 .Values.record.replicas }}{{ end }}
{{- end -}}

{{/* The container port of the probe server (capstan.probes). */}}
{{- define "capstan.probePort" -}}
- name: probes
  containerPort: {{ .Values.probePort }}
  protocol: TCP
{{- end -}}

{{/* The probes on the component's probe port. */}}
{{- define "capstan.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: probes}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: probes}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
startupProbe:
  httpGet: {path: /healthz, port: probes}
  periodSeconds: 2
  failureThreshold: 60
{{- end -}}
