module github.com/podwire/podwire/tools/checkdeps

go 1.26.0

require mvdan.cc/sh/v3 v3.14.1
