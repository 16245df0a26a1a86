// Command passthrough is the floor of a chained CNI plugin in the podwire
// benchmarks: it does what every Go plugin must (start a static binary, parse
// the config and prevResult, print the result) and nothing else. ADD returns
// prevResult unchanged; the other verbs parse the config and succeed.
// scripts/bench.sh builds it into the benchmark's own bin dir.
package main

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// parse reads the config and converts its prevResult (nil when absent).
func parse(args *skel.CmdArgs) (*types.PluginConf, *current.Result, error) {
	c := &types.PluginConf{}
	if err := json.Unmarshal(args.StdinData, c); err != nil {
		return nil, nil, err
	}
	if err := version.ParsePrevResult(c); err != nil || c.PrevResult == nil {
		return c, nil, err
	}
	res, err := current.NewResultFromResult(c.PrevResult)
	return c, res, err
}

func main() {
	nothing := func(args *skel.CmdArgs) error { _, _, err := parse(args); return err }
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			c, res, err := parse(args)
			if err == nil && res == nil {
				err = types.NewError(types.ErrInvalidNetworkConfig, "passthrough must be chained (no prevResult)", "")
			}
			if err != nil {
				return err
			}
			return types.PrintResult(res, c.CNIVersion)
		},
		Del: nothing, Check: nothing, Status: nothing, GC: nothing,
	}, version.All, "passthrough (podwire benchmark floor)")
}
