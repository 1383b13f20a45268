{{/* Names and labels. */}}
{{- define "infersight.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infersight.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "infersight.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "infersight.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "infersight.labels" -}}
app.kubernetes.io/name: {{ include "infersight.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "infersight.apiSelector" -}}
app.kubernetes.io/name: {{ include "infersight.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: api
{{- end -}}

{{- define "infersight.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Secrets: the chart's own, or the one an existingSecret names. */}}
{{- define "infersight.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- $_ := required "set database.url (a PostgreSQL URL) or database.existingSecret" .Values.database.url -}}
{{- printf "%s-database" (include "infersight.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "infersight.databaseKey" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecretKey }}{{- else -}}database-url{{- end -}}
{{- end -}}

{{- define "infersight.apiSecret" -}}
{{- if .Values.api.existingSecret -}}{{ .Values.api.existingSecret }}{{- else -}}{{ printf "%s-api" (include "infersight.fullname" .) }}{{- end -}}
{{- end -}}

{{- define "infersight.apiTokensKey" -}}
{{- if .Values.api.existingSecret -}}{{ .Values.api.existingSecretKey }}{{- else -}}api-tokens{{- end -}}
{{- end -}}

{{- define "infersight.metricsSecret" -}}
{{- if .Values.metrics.existingSecret -}}{{ .Values.metrics.existingSecret }}{{- else -}}{{ printf "%s-api" (include "infersight.fullname" .) }}{{- end -}}
{{- end -}}

{{- define "infersight.metricsKey" -}}
{{- if .Values.metrics.existingSecret -}}{{ .Values.metrics.existingSecretKey }}{{- else -}}metrics-token{{- end -}}
{{- end -}}

{{- define "infersight.sidecarSecret" -}}
{{- if .Values.sidecar.existingSecret -}}{{ .Values.sidecar.existingSecret }}{{- else -}}{{ printf "%s-sidecar" (include "infersight.fullname" .) }}{{- end -}}
{{- end -}}

{{- define "infersight.sidecarKey" -}}
{{- if .Values.sidecar.existingSecret -}}{{ .Values.sidecar.existingSecretKey }}{{- else -}}otlp-token{{- end -}}
{{- end -}}

{{/* The database URL as an environment variable read from its Secret (never an argument). */}}
{{- define "infersight.databaseEnv" -}}
- name: INFERSIGHT_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "infersight.databaseSecret" . }}
      key: {{ include "infersight.databaseKey" . }}
{{- end -}}

{{/*
The sidecar, as a native sidecar: an init container with restartPolicy: Always, started before
the inference server and kept running beside it. Its startup probe holds the server's start
until the receivers accept; its liveness probe reads /healthz, which answers 200 while the
sidecar is alive even when it cannot reach the store (it spools meanwhile), so no probe restarts
it or takes the pod out of its Service for a store outage. It has no readiness probe.
Arguments: a dict with "root" (the chart's context) and "scrape" (the server's /metrics URL).
*/}}
{{- define "infersight.sidecar.container" -}}
{{- $root := .root -}}
{{- $s := $root.Values.sidecar -}}
- name: infersight-sidecar
  image: {{ default (include "infersight.image" $root) $s.image }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  restartPolicy: Always
  command: ["infersight"]
  args:
    - sidecar
    - --otlp-grpc=0.0.0.0:{{ $s.grpcPort }}
    - --otlp-http=0.0.0.0:{{ $s.httpPort }}
    - --token-file=/run/secrets/infersight/otlp-token
    - --spool-dir=/var/lib/infersight/spool
    - --spool-max-bytes={{ int64 $s.spool.maxBytes }}
    - --scrape={{ .scrape }}
    - --gpu-source={{ $s.gpuSource }}
    - --instance=$(POD_NAME)
    {{- with .model }}
    - --model={{ . }}
    {{- end }}
    {{- if $s.profiles.enabled }}
    - --profile-target={{ $s.profiles.target }}
    - --profile-max-seconds={{ $s.profiles.maxSeconds }}
    - --profile-rate={{ $s.profiles.rate }}
    {{- if not $s.profiles.native }}
    - --profile-no-native
    {{- end }}
    {{- end }}
    {{- range $s.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- include "infersight.databaseEnv" $root | nindent 4 }}
  ports:
    - name: otlp-grpc
      containerPort: {{ $s.grpcPort }}
    - name: otlp-http
      containerPort: {{ $s.httpPort }}
  startupProbe:
    httpGet:
      path: /healthz
      port: otlp-http
    periodSeconds: 2
    failureThreshold: 60
  livenessProbe:
    httpGet:
      path: /healthz
      port: otlp-http
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 6
  resources:
    {{- toYaml $s.resources | nindent 4 }}
  securityContext:
    {{- /* One map, so that a key set in securityContext is never written twice: the chart's
    user, then yours (securityContext), then what profiles need. */}}
    {{- $ctx := dict "runAsNonRoot" true "runAsUser" $root.Values.podSecurityContext.runAsUser }}
    {{- $ctx = mergeOverwrite $ctx (deepCopy $root.Values.securityContext) }}
    {{- if $s.profiles.enabled }}
    {{- /* py-spy attaches to the serving process: it needs SYS_PTRACE. The sidecar stays
    non-root; the image's py-spy carries the file capability cap_sys_ptrace+ep, granted on
    exec only while SYS_PTRACE is in the bounding set (added here) and no_new_privs is off
    (allowPrivilegeEscalation). runAsUser 0 is the fallback for images without it. */}}
    {{- $user := $s.profiles.runAsUser }}
    {{- if kindIs "invalid" $user }}{{ $user = $ctx.runAsUser }}{{ end }}
    {{- $_ := set $ctx "capabilities" (dict "drop" (list "ALL") "add" (list "SYS_PTRACE")) }}
    {{- $_ = set $ctx "runAsUser" $user }}
    {{- $_ = set $ctx "runAsNonRoot" (gt (int $user) 0) }}
    {{- $_ = set $ctx "allowPrivilegeEscalation" (gt (int $user) 0) }}
    {{- end }}
    {{- toYaml $ctx | nindent 4 }}
  volumeMounts:
    - name: infersight-spool
      mountPath: /var/lib/infersight/spool
    - name: infersight-otlp-token
      mountPath: /run/secrets/infersight
      readOnly: true
    - name: infersight-tmp
      mountPath: /tmp
{{- end -}}

{{/* The sidecar's volumes: its spool, its token, a scratch /tmp. */}}
{{- define "infersight.sidecar.volumes" -}}
- name: infersight-spool
  emptyDir:
    sizeLimit: {{ .Values.sidecar.spool.sizeLimit }}
- name: infersight-otlp-token
  secret:
    secretName: {{ include "infersight.sidecarSecret" . }}
    items:
      - key: {{ include "infersight.sidecarKey" . }}
        path: otlp-token
- name: infersight-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}
