package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/anvil-metal/anvil/internal/cli"
)

const consoleUsage = `usage: anvil node console NODE [--read-only]

The node's serial console, live, in this terminal (raw mode): first the
scrollback the controller kept, then what the server prints; what you type
goes to the server if you hold the console's input (the first viewer to
ask gets it; the others are read-only). Ctrl-] quits. The console must be
enabled (PUT /v1/nodes/NODE/states/console {"enabled": true}, or
"baremetal node console enable NODE").
`

const consoleLogUsage = `usage: anvil node console-log NODE

What the node's serial console printed, as the controller kept it (the
last 256 KiB), whether or not anyone was watching: e.g. the kernel panic or
the ramdisk's last words before a node stopped heartbeating.
`

// quitKey ends "anvil node console" (Ctrl-], as telnet's escape).
const quitKey = 0x1d

// consoleCmd is "anvil node console NODE".
func consoleCmd(ctx context.Context, dial connect, args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	readOnly := fs.Bool("read-only", false, "watch without taking the console's input")
	pos, err := cli.Parse(fs, consoleUsage, args, "NODE")
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cons, err := c.DialConsole(ctx, pos[0], !*readOnly)
	if err != nil {
		return err
	}
	defer cons.Close()
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("raw terminal: %w", err)
		}
		defer func() { _ = term.Restore(int(f.Fd()), old) }()
	}
	mode := "you have the input"
	if !cons.Status.Input {
		mode = "read-only: another viewer has the input"
	}
	fmt.Fprintf(out, "[anvil] console of %s (%s); Ctrl-] quits\r\n", pos[0], mode)
	go func() {
		// Ctrl-] ends the session; the end of a stdin that is not a
		// terminal only ends the typing (Ctrl-C, the context, ends it).
		buf := make([]byte, 256)
		for {
			n, err := stdin.Read(buf)
			quit := false
			for i := range n {
				if buf[i] == quitKey {
					n, quit = i, true
					break
				}
			}
			if n > 0 && cons.Status.Input {
				if werr := cons.Write(ctx, buf[:n]); werr != nil {
					cancel()
					return
				}
			}
			if quit {
				cancel()
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		p, err := cons.Read(ctx)
		if errors.Is(err, io.EOF) {
			fmt.Fprint(out, "\r\n[anvil] the console was disabled\r\n")
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil // Ctrl-] or stdin ended
			}
			return err
		}
		if _, err := out.Write(p); err != nil {
			return err
		}
	}
}

// consoleLogCmd is "anvil node console-log NODE".
func consoleLogCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("console-log", flag.ContinueOnError)
	pos, err := cli.Parse(fs, consoleLogUsage, args, "NODE")
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	b, err := c.ConsoleLog(ctx, pos[0])
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}
