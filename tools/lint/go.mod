module github.com/podwire/podwire/tools/lint

go 1.26.0

require (
	github.com/ashanbrown/forbidigo/v2 v2.3.1
	go.yaml.in/yaml/v3 v3.0.4
	golang.org/x/tools v0.37.0
)

require (
	github.com/google/go-cmp v0.6.0 // indirect
	golang.org/x/mod v0.29.0 // indirect
	golang.org/x/sync v0.17.0 // indirect
)
