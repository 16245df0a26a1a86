package ociimage

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// lddPath matches the lines of ldd(1) that name a file:
// "libx.so.1 => /lib/.../libx.so.1 (0x...)" and the dynamic loader's
// "/lib64/ld-linux-x86-64.so.2 (0x...)" (linux-vdso has no path).
var lddPath = regexp.MustCompile(`(?m)^\s*(?:\S+ => )?(/\S+) \(0x`)

// HostProgram returns the host's program at path (symlinks followed, e.g.
// /usr/sbin/nft) as image files: the program at dest (path when empty),
// then every shared library ldd(1) names, and the dynamic loader, each at
// the path ldd prints, which is where the program's loader looks. A static
// program is the one file. Libraries loaded with dlopen (plugins,
// iptables' extensions) are not named by ldd: callers add them.
func HostProgram(path, dest string) ([]File, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(resolved)
	if err != nil {
		return nil, err
	}
	if dest == "" {
		dest = path
	}
	files := []File{{Path: dest, Mode: 0o755, Data: data}}
	out, err := exec.Command("ldd", resolved).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return files, nil
		}
		return nil, fmt.Errorf("failed to run ldd %s: %w: %s", resolved, err, out)
	}
	for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
		// Read through symlinks: the library itself, at the name the
		// loader asks for.
		lib, err := os.ReadFile(m[1])
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: m[1], Mode: 0o755, Data: lib})
	}
	return files, nil
}
