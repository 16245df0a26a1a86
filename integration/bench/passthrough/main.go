// Command passthrough is the floor of a chained CNI plugin in the podwire
// benchmarks: it does what every Go plugin must (start a static binary, parse
// the config and prevResult, print the result) and nothing else. ADD returns
// prevResult unchanged; CHECK, DEL, STATUS and GC succeed without work.
//
// It is built only by scripts/bench.sh, into the benchmark's own bin dir.
package main

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// conf is the plugin's config: nothing beyond the common keys.
type conf struct {
	types.PluginConf
}

func parse(stdin []byte) (*conf, *current.Result, error) {
	c := &conf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, nil, err
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return nil, nil, err
	}
	if c.PrevResult == nil {
		return c, nil, nil
	}
	res, err := current.NewResultFromResult(c.PrevResult)
	return c, res, err
}

func cmdAdd(args *skel.CmdArgs) error {
	c, res, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	if res == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "passthrough must be chained (no prevResult)", "")
	}
	return types.PrintResult(res, c.CNIVersion)
}

func cmdNothing(args *skel.CmdArgs) error {
	_, _, err := parse(args.StdinData)
	return err
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdNothing,
		Check:  cmdNothing,
		Status: func(*skel.CmdArgs) error { return nil },
		GC:     func(*skel.CmdArgs) error { return nil },
	}, version.All, "passthrough (podwire benchmark floor)")
}
