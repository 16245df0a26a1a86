{{/*
The agent's image: repository@digest when a digest is set (it wins over the
tag), else repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "podwire.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/*
podwire's conflist entry as compact JSON, from .Values.config. Empty strings,
zero numbers, empty lists and objects are left out (the plugin's defaults
apply; an empty probeSNAT would be refused); sourceCheck and the annotations
capability are always written.
*/}}
{{- define "podwire.entry" -}}
{{- $c := .Values.config -}}
{{- $e := dict "type" "podwire" "capabilities" (dict "io.kubernetes.cri.pod-annotations" $c.runtimeAnnotations) "sourceCheck" $c.sourceCheck -}}
{{- range $k := list "logFile" "logFileMaxSize" "logFileMaxBackups" "logFileMaxAge" "bridge" "uplink" "mtu" "podIfName" "vlan" "vlanTrunk" "allowedVLANs" "vlanGrants" -}}
{{- with index $c $k }}{{ $_ := set $e $k . }}{{ end -}}
{{- end -}}
{{- $fw := dict -}}
{{- with $c.forwarding.namespaces }}{{ $_ := set $fw "namespaces" . }}{{ end -}}
{{- if kindIs "map" $c.forwarding.namespaceSelector }}{{ $_ := set $fw "namespaceSelector" $c.forwarding.namespaceSelector }}{{ end -}}
{{- with $c.forwarding.routablePrefixes }}{{ $_ := set $fw "routablePrefixes" . }}{{ end -}}
{{- with $c.forwarding.sourcePrefixes }}{{ $_ := set $fw "sourcePrefixes" . }}{{ end -}}
{{- if $c.forwarding.notrack }}{{ $_ := set $fw "notrack" true }}{{ end -}}
{{- with $fw }}{{ $_ := set $e "forwarding" . }}{{ end -}}
{{- $ps := dict -}}
{{- with $c.probeSNAT.preset }}{{ $_ := set $ps "preset" . }}{{ end -}}
{{- with $c.probeSNAT.rules }}{{ $_ := set $ps "rules" . }}{{ end -}}
{{- if $ps -}}
{{- with $c.probeSNAT.interfaces }}{{ $_ := set $ps "interfaces" . }}{{ end -}}
{{- $_ := set $e "probeSNAT" $ps -}}
{{- else if $c.probeSNAT.interfaces -}}
{{- fail "config.probeSNAT.interfaces is set without config.probeSNAT.preset or rules: there is no probe to rewrite" -}}
{{- end -}}
{{- $eg := dict -}}
{{- with $c.egress.ips }}{{ $_ := set $eg "ips" . }}{{ end -}}
{{- with $c.egress.exceptCIDRs }}{{ $_ := set $eg "exceptCIDRs" . }}{{ end -}}
{{- if $c.egress.nodeAnnotation }}{{ $_ := set $eg "nodeAnnotation" true }}{{ end -}}
{{- with $c.egress.allowedCIDRs }}{{ $_ := set $eg "allowedCIDRs" . }}{{ end -}}
{{- with $eg }}{{ $_ := set $e "egress" . }}{{ end -}}
{{- range $k, $v := $c.extra -}}
{{- if has $k (list "type" "name" "cniVersion" "cniVersions" "plugins" "capabilities" "stateDir" "agentSocket") -}}
{{- fail (printf "config.extra.%s: not the operator's to set in the entry (the chart writes type and capabilities, the latter from config.runtimeAnnotations; stateDir and agentSocket follow the DaemonSet's /run/podwire; name and cniVersion belong to the conflist)" $k) -}}
{{- else if hasKey $c $k -}}
{{- fail (printf "config.extra.%s: set it as config.%s" $k $k) -}}
{{- end -}}
{{- $_ := set $e $k $v -}}
{{- end -}}
{{- toJson $e -}}
{{- end -}}

{{/*
Whether the chart renders a ConfigMap (templates/15-config.yaml); the
DaemonSet then carries its checksum.
*/}}
{{- define "podwire.hasConfigMaps" -}}
{{- if or .Values.config.create .Values.kubernetesServicesEndpoint.host }}true{{ end -}}
{{- end -}}

{{/*
The Namespace label keys that podwire's namespaceSelectors read, as a JSON
list (a CEL list literal), sorted: the keys of config.forwarding's and every
config.vlanGrants entry's namespaceSelector (matchLabels and
matchExpressions) and admissionPolicies.namespaceLabelKeys, without
kubernetes.io/metadata.name (the apiserver sets it to the name).
*/}}
{{- define "podwire.namespaceLabelKeys" -}}
{{- $sels := list .Values.config.forwarding.namespaceSelector -}}
{{- range .Values.config.vlanGrants }}{{ $sels = append $sels (get . "namespaceSelector") }}{{ end -}}
{{- $keys := list -}}
{{- range $sels }}
{{- if kindIs "map" . }}
{{- range $k, $_ := (get . "matchLabels" | default dict) }}{{ $keys = append $keys $k }}{{ end }}
{{- range (get . "matchExpressions" | default list) }}{{ $keys = append $keys .key }}{{ end }}
{{- end }}
{{- end -}}
{{- $keys = concat $keys .Values.admissionPolicies.namespaceLabelKeys -}}
{{- without ($keys | uniq | sortAlpha) "kubernetes.io/metadata.name" | toJson -}}
{{- end -}}

{{/*
"true" when updateStrategy replaces each node's agent by a surge (a
RollingUpdate whose maxSurge is not 0): the new agent runs beside the old
one, so the DaemonSet declares no port (a host port under the host network).
*/}}
{{- define "podwire.surge" -}}
{{- $u := .Values.updateStrategy -}}
{{- if and (eq $u.type "RollingUpdate") $u.rollingUpdate -}}
{{- $s := toString (get $u.rollingUpdate "maxSurge" | default 0) -}}
{{- if not (has $s (list "0" "0%")) }}true{{ end -}}
{{- end -}}
{{- end -}}
