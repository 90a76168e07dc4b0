package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/anvil-metal/anvil/internal/cli"
)

const vmediaUsage = `usage: anvil node vmedia attach NODE URL [--device cdrom|disk|floppy] [--source local|http]
       anvil node vmedia detach NODE [--device cdrom|disk|floppy]
       anvil node vmedia show NODE [--json]

attach inserts the image at URL into the node's virtual media slot (the
controller checks that the BMC holds it; API 1.89). --source local (the
default, as Ironic's) has the controller download the image and serve it
to the BMC; http has the BMC fetch URL itself. detach ejects the device
(every device without --device). show reads the slots from the BMC (1.93).
`

const subscriptionUsage = `usage: anvil node subscription create NODE DESTINATION [--context C] [--event-type T]... [--header K=V]...
       anvil node subscription delete NODE ID
       anvil node subscription list NODE [--json]

BMC event subscriptions (Redfish EventService, through the redfish vendor
interface's vendor_passthru): the BMC posts its events to DESTINATION.
`

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// vmediaCmd is "anvil node vmedia attach|detach|show".
func vmediaCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	if len(args) == 0 || cli.IsHelp(args[0]) {
		if len(args) == 0 {
			return cli.Errorf(vmediaUsage, "missing command")
		}
		return cli.Help(vmediaUsage)
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("vmedia "+sub, flag.ContinueOnError)
	device := fs.String("device", "", "the device type: cdrom, disk or floppy")
	var pos []string
	var err error
	switch sub {
	case "attach":
		source := fs.String("source", "", "image_download_source: local (the controller serves the image) or http (the BMC fetches URL)")
		if pos, err = cli.Parse(fs, vmediaUsage, rest, "NODE", "URL"); err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		dev := *device
		if dev == "" {
			dev = "cdrom"
		}
		if err := c.AttachVirtualMedia(ctx, pos[0], dev, pos[1], *source); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s attached to %s\n", dev, pos[0])
		return err
	case "detach":
		if pos, err = cli.Parse(fs, vmediaUsage, rest, "NODE"); err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		var devs []string
		if *device != "" {
			devs = []string{*device}
		}
		return c.DetachVirtualMedia(ctx, pos[0], devs)
	case "show":
		asJSON := fs.Bool("json", false, "print the slots as JSON")
		if pos, err = cli.Parse(fs, vmediaUsage, rest, "NODE"); err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		slots, err := c.VirtualMedia(ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, slots)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MEDIA TYPES\tINSERTED\tIMAGE")
		for _, s := range slots {
			img := "-"
			if s.Image != nil {
				img = *s.Image
			}
			fmt.Fprintf(tw, "%s\t%t\t%s\n", strings.Join(s.MediaTypes, ","), s.Inserted, img)
		}
		return tw.Flush()
	}
	return cli.Errorf(vmediaUsage, "unknown command %q", sub)
}

// subscriptionCmd is "anvil node subscription create|delete|list".
func subscriptionCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	if len(args) == 0 || cli.IsHelp(args[0]) {
		if len(args) == 0 {
			return cli.Errorf(subscriptionUsage, "missing command")
		}
		return cli.Help(subscriptionUsage)
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("subscription "+sub, flag.ContinueOnError)
	switch sub {
	case "create":
		subCtx := fs.String("context", "", "the Context the BMC sends with each event")
		var types, headers multiFlag
		fs.Var(&types, "event-type", "an event type to subscribe to (repeatable; default Alert)")
		fs.Var(&headers, "header", "an HTTP header K=V the BMC sends with each event (repeatable)")
		pos, err := cli.Parse(fs, subscriptionUsage, rest, "NODE", "DESTINATION")
		if err != nil {
			return err
		}
		hdrs := map[string]string{}
		for _, h := range headers {
			k, v, ok := strings.Cut(h, "=")
			if !ok || k == "" {
				return cli.Errorf(subscriptionUsage, "--header %q: want K=V", h)
			}
			hdrs[k] = v
		}
		c, err := dial()
		if err != nil {
			return err
		}
		s, err := c.CreateSubscription(ctx, pos[0], pos[1], *subCtx, types, hdrs)
		if err != nil {
			return err
		}
		return printJSON(out, s)
	case "delete":
		pos, err := cli.Parse(fs, subscriptionUsage, rest, "NODE", "ID")
		if err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		return c.DeleteSubscription(ctx, pos[0], pos[1])
	case "list":
		asJSON := fs.Bool("json", false, "print the subscriptions as JSON")
		pos, err := cli.Parse(fs, subscriptionUsage, rest, "NODE")
		if err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		subs, err := c.Subscriptions(ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, subs)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tDESTINATION\tEVENT TYPES\tCONTEXT")
		for _, s := range subs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.ID, s.Destination, strings.Join(s.EventTypes, ","), orDash(s.Context))
		}
		return tw.Flush()
	}
	return cli.Errorf(subscriptionUsage, "unknown command %q", sub)
}
