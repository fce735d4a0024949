{{/* Full name: the release name, unless it already contains the chart name. */}}
{{- define "tessera.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tessera.serviceAccountName" -}}
{{- default (include "tessera.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "tessera.labels" -}}
app.kubernetes.io/name: tessera
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tessera.selector" -}}
app.kubernetes.io/name: tessera
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Environment shared by web, worker and beat. */}}
{{- define "tessera.env" -}}
- name: TESSERA_ENV
  value: {{ .Values.django.env | quote }}
- name: ALLOWED_HOSTS
  value: {{ .Values.django.allowedHosts | quote }}
- name: CSRF_TRUSTED_ORIGINS
  value: {{ .Values.django.csrfTrustedOrigins | quote }}
- name: SECURE_SSL_REDIRECT
  value: {{ .Values.django.secureSslRedirect | quote }}
- name: TESSERA_TRUST_PROXY_SSL_HEADER
  value: {{ .Values.django.trustProxySslHeader | quote }}
- name: TESSERA_TRUSTED_PROXY_COUNT
  value: {{ .Values.django.trustedProxyCount | quote }}
- name: LOG_LEVEL
  value: {{ .Values.django.logLevel | quote }}
- name: TESSERA_VAR_DIR
  value: /var/lib/tessera
- name: SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.django.existingSecret }}
      key: {{ .Values.django.secretKeyKey }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.django.existingSecret }}
      key: {{ .Values.django.databaseUrlKey }}
{{- if .Values.broker.existingSecret }}
- name: CELERY_BROKER_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.broker.existingSecret }}
      key: {{ .Values.broker.urlKey }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.broker.existingSecret }}
      key: {{ .Values.broker.redisUrlKey }}
{{- else }}
- name: CELERY_BROKER_URL
  value: {{ .Values.broker.url | quote }}
- name: REDIS_URL
  value: {{ .Values.broker.redisUrl | quote }}
{{- end }}
- name: TESSERA_BACKEND
  value: kubernetes
- name: TESSERA_KUBECONFIG
  value: ""
- name: TESSERA_KUBE_NAMESPACE
  value: {{ first .Values.kubernetes.managedNamespaces | quote }}
- name: TESSERA_KUBE_MODE
  value: {{ .Values.kubernetes.mode | quote }}
- name: TESSERA_CODESPACE_IMAGE_PULL_POLICY
  value: {{ .Values.kubernetes.codespaceImagePullPolicy | quote }}
- name: TESSERA_KUBE_STORAGE_CLASS
  value: {{ .Values.kubernetes.storageClass | quote }}
- name: TESSERA_KUBE_RUNTIME_CLASS
  value: {{ .Values.kubernetes.runtimeClass | quote }}
- name: TESSERA_CODESPACE_PORT
  value: {{ .Values.kubernetes.codespacePort | quote }}
- name: TESSERA_KUBE_DRA_DRIVER
  value: {{ .Values.kubernetes.dra.driver | quote }}
- name: TESSERA_KUBE_DRA_DEVICE_CLASSES
  value: {{ .Values.kubernetes.dra.deviceClasses | quote }}
{{- end -}}

{{/* Container hardening shared by every container. */}}
{{- define "tessera.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
