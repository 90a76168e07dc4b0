package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Tool is a command a build or demo needs and the Debian package that has
// it.
type Tool struct{ Command, Package string }

// EnsureTools installs, with apt-get, the packages of the tools not on
// PATH, so that the README's one command works on a fresh Debian machine.
// That needs root; otherwise the error says what to run. why is shown
// while installing ("needed to run the virtual node").
func EnsureTools(ctx context.Context, out io.Writer, why string, tools ...Tool) error {
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t.Command); err != nil && !slices.Contains(missing, t.Package) {
			missing = append(missing, t.Package)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	pkgs := strings.Join(missing, " ")
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s not installed and installing needs root: run `sudo apt-get install -y %s`", pkgs, pkgs)
	}
	fmt.Fprintf(out, "installing %s with apt-get (%s)...\n", pkgs, why)
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-qq"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w: %s", pkgs, err, b)
	}
	return nil
}
