package conductor

// Sanitization records: the step runner signs one for every device an
// erase step erased.

import (
	"context"
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/store"
)

// signRecords signs and stores a record for every device the erase run
// res erased, and returns the history event that lists them. Records are
// stored before the node moves on: a failure here is retried with the
// agent's repeated report (record ids derive from the run and device).
func (c *stepRunner) signRecords(ctx context.Context, n *store.Node, res *store.StepResult) ([]*store.Event, error) {
	if c.cfg.Records == nil || len(res.Result) == 0 {
		return nil, nil
	}
	if res.Step == erasure.StepEraseMetadata && res.Outcome == store.OutcomeSucceeded {
		// Said once per run, so nobody takes the wipe for a sanitization.
		return []*store.Event{c.newEvent(n.UUID, "INFO", "cleaning", "no sanitization records for "+res.Step+
			": a metadata wipe removes partition tables and signatures, not the data (not an SP 800-88 clear or purge)")}, nil
	}
	if !erasure.Certifies(res.Step) {
		return nil, nil
	}
	image := ""
	if c.cfg.RamdiskSHA256 != nil {
		image = c.cfg.RamdiskSHA256()
	}
	recs, err := erasure.Build(erasure.Input{Node: n, Controller: c.cfg.Host, Result: res,
		Manual: n.Operation.ManualClean, RequestedBy: n.Operation.CleaningRequestedBy, ImageSHA: image, Now: c.now()})
	if err != nil {
		// A result the controller cannot read is kept as it is (the step
		// result has it); it just certifies nothing.
		c.log.Error("reading an erase result for sanitization records failed", "node", n.UUID, "step", res.Step, "err", err)
		return []*store.Event{c.newEvent(n.UUID, "WARNING", "cleaning", "no sanitization records: "+err.Error())}, nil
	}
	const expressNote = "erase_devices_express only wiped the metadata of devices without NVMe Format, which is not a clear or purge: no record for them"
	if len(recs) == 0 {
		if res.Step == erasure.StepEraseExpress && res.Outcome == store.OutcomeSucceeded {
			return []*store.Event{c.newEvent(n.UUID, "INFO", "cleaning", "no sanitization records: "+expressNote)}, nil
		}
		return nil, nil
	}
	signed := make([]*store.EraseRecord, 0, len(recs))
	parts := make([]string, 0, len(recs))
	for _, r := range recs {
		s, err := c.cfg.Records.Sign(r)
		if err != nil {
			return nil, fmt.Errorf("sign sanitization record: %w", err)
		}
		signed = append(signed, s)
		parts = append(parts, fmt.Sprintf("%s (serial %s, %s: %s) record %s", r.Media.Device, orNone(r.Media.Serial),
			r.Sanitization.Category, r.Sanitization.Method, r.UUID))
	}
	if err := c.st.PutEraseRecords(ctx, signed); err != nil {
		return nil, fmt.Errorf("store sanitization records: %w", err)
	}
	what := "sanitization records signed"
	if n.Retired {
		what = "retired node cleaned for disposal: sanitization records signed"
	}
	msg := what + ": " + strings.Join(parts, "; ")
	if res.Step == erasure.StepEraseExpress {
		msg += "; " + expressNote
	}
	return []*store.Event{c.newEvent(n.UUID, "INFO", "cleaning", msg)}, nil
}

func orNone(s string) string {
	if s == "" {
		return "none reported"
	}
	return s
}
