package image

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
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

// Standalone says whether a u-root command is built as its own binary
// rather than into the busybox. The busybox is /init, so every package
// initialiser in it runs at each boot: gosh's line editor pulls in
// go-runewidth, whose init builds its width tables and took 0.23 s of a
// TCG boot (GODEBUG=inittrace=1), a third of u-root init's start. As its
// own binary gosh costs that only when a shell starts, and 1.6 MB.
func Standalone(pkg string) bool {
	return pkg == "github.com/u-root/u-root/cmds/core/gosh"
}

// splitStandalone separates the busybox's commands from those built on
// their own.
func splitStandalone(cmds []string) (bb, own []string) {
	for _, c := range cmds {
		if Standalone(c) {
			own = append(own, c)
		} else {
			bb = append(bb, c)
		}
	}
	return bb, own
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
	bb, own := splitStandalone(cfg.Commands)
	mods := []uimage.Modifier{
		uimage.WithReplaceEnv(env),
		uimage.WithBaseArchive(uimage.DefaultRamfs()),
		uimage.WithTempDir(cfg.TempDir),
		uimage.WithCPIOOutput(cfg.Output),
		uimage.WithBusyboxCommands(bb...),
	}
	if len(own) > 0 {
		mods = append(mods, uimage.WithBinaryCommands(own...))
		for _, c := range own {
			// Scripts (and habits) name the busybox path.
			name := path.Base(c)
			mods = append(mods, uimage.WithSymlink("bbin/"+name, "/bin/"+name))
		}
	}
	err = uimage.Create(ll, append(mods,
		uimage.WithInit("init"),
		uimage.WithShell("gosh"),
		uimage.WithUinit(cfg.Uinit),
		uimage.WithSkipLDD(),
	)...)
	if err != nil {
		return fmt.Errorf("u-root build: %w", err)
	}
	return nil
}
