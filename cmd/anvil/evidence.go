package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/anvil-metal/anvil/controller/client"
)

// What anvil node show says of a node's hardware evidence: the newest
// deploy.verify_hardware run and the newest run of each deploy.burnin_*
// step, each with its date, outcome and one-line summary. They are read
// from the step results, newest first, a page at a time, up to
// evidencePages pages: older evidence is not hunted for.
const (
	verifyStep    = "deploy.verify_hardware"
	burninPrefix  = "deploy.burnin_"
	evidencePage  = 50
	evidencePages = 4
)

// lastEvidence picks from results, newest first, the newest verification
// (nil: none) and the newest run of each burn-in step, newest first.
func lastEvidence(results []stepResult) (*stepResult, []stepResult) {
	var verify *stepResult
	var burnin []stepResult
	seen := map[string]bool{}
	for i, r := range results {
		switch {
		case r.Step == verifyStep && verify == nil:
			verify = &results[i]
		case strings.HasPrefix(r.Step, burninPrefix) && !seen[r.Step]:
			seen[r.Step] = true
			burnin = append(burnin, r)
		}
	}
	return verify, burnin
}

// evidenceLines are show's lines for what lastEvidence picked.
func evidenceLines(verify *stepResult, burnin []stepResult) []string {
	line := func(label string, r stepResult) string {
		// A failed run's summary counts; its error names what failed.
		text := r.Summary
		if r.Error != "" && r.Outcome != "succeeded" {
			text = strings.TrimPrefix(text+": "+r.Error, ": ")
		}
		return fmt.Sprintf("%s: %s %s at %s: %s", label, r.Step, r.Outcome, r.FinishedAt, trim(oneLine(text), 300))
	}
	out := []string{"LAST VERIFICATION: none"}
	if verify != nil {
		out[0] = line("LAST VERIFICATION", *verify)
	}
	if len(burnin) == 0 {
		return append(out, "LAST BURN-IN: none")
	}
	for _, r := range burnin {
		out = append(out, line("LAST BURN-IN", r))
	}
	return out
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// readEvidence pages through the node's step results until both a
// verification and a burn-in are found.
func readEvidence(ctx context.Context, c *client.Client, node string) (*stepResult, []stepResult, error) {
	var all []stepResult
	q := url.Values{"limit": {fmt.Sprint(evidencePage)}}
	for range evidencePages {
		var body struct {
			Results []stepResult `json:"results"`
			Next    string       `json:"next"`
		}
		if err := c.Do(ctx, "GET", "/v1/nodes/"+url.PathEscape(node)+"/steps/results?"+q.Encode(), nil, &body); err != nil {
			return nil, nil, err
		}
		all = append(all, body.Results...)
		if v, b := lastEvidence(all); (v != nil && len(b) > 0) || body.Next == "" || len(body.Results) == 0 {
			break
		}
		q.Set("marker", body.Results[len(body.Results)-1].UUID)
	}
	v, b := lastEvidence(all)
	return v, b, nil
}

// showEvidence prints the evidence lines; a controller without step
// results (older API) prints nothing.
func showEvidence(ctx context.Context, c *client.Client, node string, out io.Writer) error {
	v, b, err := readEvidence(ctx, c, node)
	if err != nil {
		return nil
	}
	for _, l := range evidenceLines(v, b) {
		if _, err := fmt.Fprintln(out, l); err != nil {
			return err
		}
	}
	return nil
}
