package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/internal/cli"
)

const timelineUsage = `usage: anvil node timeline NODE [--all] [--json]

The node's latest boot as the controller saw it, stage by stage, with the
time since the boot began: the BMC's boot device and power, DHCP (the file
offered), TFTP and HTTP downloads (bytes, duration, file not found), the
agent's lookup and first heartbeat, steps. The last line says where a boot
that never came up stopped. --all shows every boot the controller keeps
(the last 10), newest first.
`

// timelineCmd is "anvil node timeline NODE".
func timelineCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	all := fs.Bool("all", false, "every boot kept, newest first")
	asJSON := fs.Bool("json", false, "print the boots as JSON")
	pos, err := cli.Parse(fs, timelineUsage, args, "NODE")
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	limit := 1
	if *all {
		limit = 0
	}
	boots, err := c.BootTimeline(ctx, pos[0], limit)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, boots)
	}
	if len(boots) == 0 {
		_, err := fmt.Fprintf(out, "%s: no boot recorded yet (the timeline starts when the controller boots the node or sees it on the network)\n", pos[0])
		return err
	}
	for i, b := range boots {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if err := printBoot(out, b); err != nil {
			return err
		}
	}
	return nil
}

// printBoot writes one boot: a heading, then a table of its stages with
// the time since its first.
func printBoot(out io.Writer, b client.Boot) error {
	head := fmt.Sprintf("boot %d", b.Number)
	if b.BootID != nil {
		head += " (agent boot " + *b.BootID + ")"
	}
	if len(b.Stages) > 0 {
		head += ", began " + b.Stages[0].At.UTC().Format(time.RFC3339)
	}
	fmt.Fprintln(out, head)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  AFTER\tSTAGE\tOUTCOME\tDETAIL")
	for _, s := range b.Stages {
		outcome := s.Outcome
		if outcome == "" {
			outcome = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", sinceStart(s.At.Sub(b.Stages[0].At)), s.Stage, trim(outcome, 50), s.Detail)
	}
	return tw.Flush()
}

// sinceStart writes a stage's offset from its boot's start: +1.234s,
// +2m03s.
func sinceStart(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("+%.3fs", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("+%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}
