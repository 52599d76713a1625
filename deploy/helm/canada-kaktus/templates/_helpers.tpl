{{/*
Labels on every object: the one deploy/ (kustomize) sets, which selectors
use, plus Helm's own.
*/}}
{{- define "canada-kaktus.selectorLabels" -}}
app.kubernetes.io/name: canada-kaktus
{{- end }}

{{- define "canada-kaktus.labels" -}}
{{ include "canada-kaktus.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The pool the controller writes: also the RBAC resourceNames. */}}
{{- define "canada-kaktus.poolName" -}}
{{- /* As the controller reads it: text, trimmed; blank is unset. */ -}}
{{- .Values.config.PoolName | default "" | toString | trim | default "covidnetes-pool" -}}
{{- end }}

{{/* Every pool the controller writes: the names in config.Pools, else the
one pool of config.PoolName. A JSON list, for the RBAC resourceNames. */}}
{{- define "canada-kaktus.poolNames" -}}
{{- if .Values.config.Pools -}}
{{- $names := list -}}
{{- range .Values.config.Pools -}}
{{- /* As the controller reads it: text, blanks around it dropped. */ -}}
{{- $name := toString .Name | trim -}}
{{- if has $name $names -}}
{{- fail (printf "config.Pools: two pools are named %q; each pool keeps its own CiliumLoadBalancerIPPool, so give each its own Name" $name) -}}
{{- end -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- toJson $names -}}
{{- else -}}
{{- list (include "canada-kaktus.poolName" .) | toJson -}}
{{- end -}}
{{- end }}

{{/* The leader-election Lease: also the RBAC resourceNames. */}}
{{- define "canada-kaktus.leaseName" -}}
{{- .Values.config.LeaseName | default "" | toString | trim | default "canada-kaktus" -}}
{{- end }}

{{- define "canada-kaktus.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The Secret holding the token: the chart's own when a token was given. */}}
{{- define "canada-kaktus.tokenSecret" -}}
{{- if .Values.token.value -}}
canada-kaktus-token
{{- else -}}
{{- required "token.existingSecret or token.value must be set" .Values.token.existingSecret -}}
{{- end -}}
{{- end }}

{{/* "true" when config.LeaderElection turns leader election off (false, off,
no or 0 in any case, as the controller reads it). */}}
{{- define "canada-kaktus.leaderElectionOff" -}}
{{- $mode := .Values.config.LeaderElection | toString | trim | lower -}}
{{- has $mode (list "false" "off" "no" "0") -}}
{{- end }}

{{/* "true" when config.Events turns the Kubernetes Events off (false, off,
no or 0 in any case, as the controller reads it): the Events Role is then
not installed. */}}
{{- define "canada-kaktus.eventsOff" -}}
{{- $mode := .Values.config.Events | toString | trim | lower -}}
{{- has $mode (list "false" "off" "no" "0") -}}
{{- end }}

{{/* "true" when a pool of config.Pools has FloatingIpFailover on (true,
on, yes or 1 in any case): only then does the controller read the
kubelets' Leases, and only then is the node-lease Role installed. */}}
{{- define "canada-kaktus.failover" -}}
{{- $on := false -}}
{{- $pools := .Values.config.Pools -}}
{{- if kindIs "slice" $pools -}}
{{- range $pools -}}
{{- if kindIs "map" . -}}
{{- if has (get . "FloatingIpFailover" | toString | trim | lower) (list "true" "on" "yes" "1") -}}
{{- $on = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $on -}}
{{- end }}

{{/* "true" when holderLabels.enabled is true or a pool of config.Pools has
HolderLabel on (true, on, yes or 1 in any case): only then are the
holder-labels ClusterRole and ValidatingAdmissionPolicy installed. */}}
{{- define "canada-kaktus.holderLabels" -}}
{{- $on := eq (toString .Values.holderLabels.enabled) "true" -}}
{{- $pools := .Values.config.Pools -}}
{{- if kindIs "slice" $pools -}}
{{- range $pools -}}
{{- if kindIs "map" . -}}
{{- if has (get . "HolderLabel" | toString | trim | lower) (list "true" "on" "yes" "1") -}}
{{- $on = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $on -}}
{{- end }}

{{/* One egress rule of the network policy to the host of a URL: toFQDNs for
a name, toCIDR for an address; its port, else 443 (80 for http). */}}
{{- define "canada-kaktus.egressTo" -}}
{{- $url := urlParse . -}}
{{- $hostPort := $url.host | lower -}}
{{- $host := $hostPort -}}
{{- $port := ternary "80" "443" (eq $url.scheme "http") -}}
{{- if hasPrefix "[" $hostPort -}}
{{- $host = regexReplaceAll "^\\[([^]]*)\\].*$" $hostPort "${1}" -}}
{{- if regexMatch "\\]:[0-9]+$" $hostPort -}}
{{- $port = regexReplaceAll "^.*\\]:([0-9]+)$" $hostPort "${1}" -}}
{{- end -}}
{{- else if contains ":" $hostPort -}}
{{- $host = splitList ":" $hostPort | first -}}
{{- $port = splitList ":" $hostPort | last | default $port -}}
{{- end -}}
{{- if regexMatch "^[0-9.]+$" $host -}}
- toCIDR:
    - {{ printf "%s/32" $host | quote }}
{{- else if contains ":" $host -}}
- toCIDR:
    - {{ printf "%s/128" $host | quote }}
{{- else -}}
- toFQDNs:
    - matchName: {{ $host | quote }}
{{- end }}
  toPorts:
    - ports:
        - port: {{ $port | quote }}
          protocol: TCP
{{- end }}
