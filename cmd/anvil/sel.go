package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/anvil-metal/anvil/internal/cli"
)

const selUsage = `usage: anvil node sel NODE [--json]

The System Event Log of the node's BMC, read live, oldest first: what the
hardware logged (memory errors, thermal and power events, watchdogs, NMIs).
Times are the BMC's own.
`

const nmiUsage = `usage: anvil node nmi NODE

Has the node's BMC send it a non-maskable interrupt (Ironic's inject_nmi):
a hung Linux kernel panics and prints its state on the console (or kdump
saves it). Use it on a node that stopped answering; it does not power the
node off. Refused (NodeLocked) while the controller works on the node.
`

// selCmd is "anvil node sel NODE".
func selCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sel", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the entries as JSON")
	pos, err := cli.Parse(fs, selUsage, args, "NODE")
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	entries, err := c.SEL(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, entries)
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintf(out, "%s: the BMC's event log is empty\n", pos[0])
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tSENSOR\tMESSAGE")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", dash(e.ID), dash(e.Created), dash(e.Sensor), e.Message)
	}
	return tw.Flush()
}

// nmiCmd is "anvil node nmi NODE".
func nmiCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("nmi", flag.ContinueOnError)
	pos, err := cli.Parse(fs, nmiUsage, args, "NODE")
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	if err := c.InjectNMI(ctx, pos[0]); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s: NMI sent (see its console; anvil node sel %s shows what the BMC logged)\n", pos[0], pos[0])
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
