package image

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/u-root/gobusybox/src/pkg/golang"
	"github.com/u-root/mkuimage/uimage"
	"github.com/u-root/uio/llog"
)

// DefaultCommands are the u-root commands in the base image: init, a shell
// and what it takes to debug a node from its console.
func DefaultCommands() []string {
	names := []string{
		"init", "gosh", "ls", "cat", "echo", "ip", "dhclient", "dmesg", "mount", "ps", "dd",
		"insmod", "rmmod", "lsmod", "shutdown", "sleep", "uname", "free",
	}
	pkgs := make([]string, len(names))
	for i, n := range names {
		pkgs[i] = "github.com/u-root/u-root/cmds/core/" + n
	}
	return pkgs
}

// UrootConfig says how to build the u-root base archive.
type UrootConfig struct {
	// ModuleDir is a Go module whose go.mod requires u-root (the anvil
	// repository: image/deps.go keeps the commands in its module graph).
	ModuleDir string
	// Commands are Go package paths built into the busybox.
	Commands []string
	// Uinit is what /bin/uinit links to: the agent, added later by the
	// overlay.
	Uinit string
	// TempDir holds the busybox build tree.
	TempDir string
	// Output is the uncompressed cpio to write.
	Output string
}

// BuildUroot builds u-root's busybox with the given commands into a cpio,
// with u-root's init as /init, gosh as the shell and /bin/uinit pointing
// at cfg.Uinit. This is the slow part of an image build (30–60 s).
func BuildUroot(ctx context.Context, log *slog.Logger, cfg UrootConfig) error {
	if v := os.Getenv("GOAMD64"); v != "" && v != "v1" {
		// Env is inherited by the go command gobusybox runs; a newer
		// microarchitecture level would not boot on QEMU's default CPU.
		return fmt.Errorf("u-root build: GOAMD64=%s; unset it or use v1", v)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The toolchain that builds the busybox is the one in PATH. go/build's
	// default GOROOT is empty in a -trimpath binary, so ask it.
	goroot, err := run(ctx, cfg.ModuleDir, "go", "env", "GOROOT")
	if err != nil {
		return fmt.Errorf("u-root build: %w", err)
	}
	env := golang.Default(golang.DisableCGO(), golang.WithGOOS("linux"), golang.WithGOARCH("amd64"),
		golang.WithGOROOT(strings.TrimSpace(goroot)), golang.WithWorkingDir(cfg.ModuleDir))
	ll := llog.New(slog.LevelInfo, func(format string, args ...any) {
		log.Debug(strings.TrimSpace(fmt.Sprintf(format, args...)), "component", "u-root")
	})
	err = uimage.Create(ll,
		uimage.WithReplaceEnv(env),
		uimage.WithBaseArchive(uimage.DefaultRamfs()),
		uimage.WithTempDir(cfg.TempDir),
		uimage.WithCPIOOutput(cfg.Output),
		uimage.WithBusyboxCommands(cfg.Commands...),
		uimage.WithInit("init"),
		uimage.WithShell("gosh"),
		uimage.WithUinit(cfg.Uinit),
		uimage.WithSkipLDD(),
	)
	if err != nil {
		return fmt.Errorf("u-root build: %w", err)
	}
	return nil
}
