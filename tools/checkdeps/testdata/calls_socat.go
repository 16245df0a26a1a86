package fixture

import "os/exec"

// runIn passes its first parameter to exec.Command: a wrapper.
func runIn(name string, args ...string) error {
	return exec.Command(name, args...).Run()
}

func f() {
	_ = runIn("socat", "-V")
	_ = exec.Command("ip", "link").Run()
}
