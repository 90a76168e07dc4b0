package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvil-metal/anvil/internal/cli"
)

// stepResult is what the CLI shows of GET /v1/nodes/{node}/steps/results.
type stepResult struct {
	UUID            string          `json:"uuid"`
	Kind            string          `json:"kind"`
	Step            string          `json:"step"`
	StartedAt       string          `json:"started_at"`
	FinishedAt      string          `json:"finished_at"`
	Outcome         string          `json:"outcome"`
	Error           string          `json:"error"`
	Summary         string          `json:"summary"`
	RebootRequested bool            `json:"reboot_requested"`
	AgentVersion    string          `json:"agent_version"`
	Result          json.RawMessage `json:"result"`
	ResultTruncated bool            `json:"result_truncated"`
}

const stepResultsUsage = `usage: anvil node step-results NODE [--limit N] [--json]

The node's step runs, newest first: one line per run (kind, step, outcome,
duration), then one per device the run reported (erase and metadata steps).
`

// stepResults prints a node's step runs, newest first: one line per run,
// then one per device the run reported (erase and metadata steps).
func stepResults(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("step-results", flag.ContinueOnError)
	limit := fs.Int("limit", 20, "show the newest N runs")
	asJSON := fs.Bool("json", false, "print the results as the API returns them")
	pos, err := cli.Parse(fs, stepResultsUsage, args, "NODE")
	if err != nil {
		return err
	}
	node := pos[0]
	c, err := dial()
	if err != nil {
		return err
	}
	var body struct {
		Results []json.RawMessage `json:"results"`
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if err := c.Do(ctx, "GET", "/v1/nodes/"+url.PathEscape(node)+"/steps/results?"+q.Encode(), nil, &body); err != nil {
		return err
	}
	if *asJSON {
		b, _ := json.MarshalIndent(body.Results, "", "  ")
		_, err := fmt.Fprintln(out, string(b))
		return err
	}
	if len(body.Results) == 0 {
		_, err := fmt.Fprintln(out, "no step has run on this node yet")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FINISHED\tKIND\tSTEP\tOUTCOME\tTOOK\tDETAIL")
	for _, raw := range body.Results {
		var r stepResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("step result: %w", err)
		}
		detail := r.Summary
		if r.Error != "" {
			detail = r.Error
		}
		if r.RebootRequested {
			detail = strings.TrimSpace(detail + " (reboot requested)")
		}
		if r.ResultTruncated {
			detail += " [result too large, not kept]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.FinishedAt, r.Kind, r.Step, r.Outcome, took(r.StartedAt, r.FinishedAt), trim(detail, 100))
		for _, line := range deviceLines(r.Result) {
			fmt.Fprintf(tw, "\t\t  %s\t\t\t\n", line)
		}
	}
	return tw.Flush()
}

// took is the duration between two API timestamps, or "-".
func took(start, end string) string {
	const layout = "2006-01-02T15:04:05.000000-07:00"
	s, err1 := time.Parse(layout, start)
	e, err2 := time.Parse(layout, end)
	if err1 != nil || err2 != nil {
		return "-"
	}
	return e.Sub(s).Round(100 * time.Millisecond).String()
}

// deviceLines reads the per-device part of an agent's result, when it has
// one: erase_devices (devices[].plan.device, status, method, bytes) and
// erase_devices_metadata (devices[].device, status, reason).
func deviceLines(raw json.RawMessage) []string {
	var res struct {
		Devices []struct {
			Device string `json:"device"`
			Plan   struct {
				Device string `json:"device"`
				Reason string `json:"reason"`
			} `json:"plan"`
			Status  string  `json:"status"`
			Method  string  `json:"method"`
			Bytes   uint64  `json:"bytes"`
			Seconds float64 `json:"seconds"`
			Error   string  `json:"error"`
			Reason  string  `json:"reason"`
		} `json:"devices"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &res) != nil {
		return nil
	}
	var out []string
	for _, d := range res.Devices {
		dev := d.Plan.Device
		if dev == "" {
			dev = d.Device
		}
		line := dev + " " + d.Status
		if d.Method != "" {
			line += " by " + d.Method
		}
		if d.Bytes > 0 {
			line += fmt.Sprintf(", %d bytes", d.Bytes)
		}
		if d.Seconds > 0 {
			line += fmt.Sprintf(", %.1f s", d.Seconds)
		}
		for _, why := range []string{d.Error, d.Reason, d.Plan.Reason} {
			if why != "" && d.Status != "erased" {
				line += ": " + why
				break
			}
		}
		out = append(out, line)
	}
	return out
}
