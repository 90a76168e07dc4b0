package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// BuildAgent builds the agent as a static, stripped, reproducible binary
// for the ramdisk (linux/amd64, GOAMD64=v1 for QEMU's default CPU model).
func BuildAgent(ctx context.Context, repo, pkg, output string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid=", "-o", output, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOAMD64=v1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build agent %s: %w: %s", pkg, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// goModuleVersion is the version of module mod in repo's build list.
func goModuleVersion(ctx context.Context, repo, mod string) (string, error) {
	out, err := run(ctx, repo, "go", "list", "-m", "-f", "{{.Version}}", mod)
	if err != nil {
		return "", fmt.Errorf("version of %s: %w", mod, err)
	}
	return strings.TrimSpace(out), nil
}

// gitRevision is HEAD of repo and whether the work tree differs from it;
// "unknown" outside a git checkout.
func gitRevision(ctx context.Context, repo string) (string, bool) {
	rev, err := run(ctx, repo, "git", "rev-parse", "HEAD")
	if err != nil {
		return "unknown", false
	}
	status, err := run(ctx, repo, "git", "status", "--porcelain", "--untracked-files=no")
	return strings.TrimSpace(rev), err == nil && strings.TrimSpace(status) != ""
}
