package conductor

import (
	"context"
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/store"
)

// eraseStep is the step whose runs produce sanitization records.
const eraseStep = "deploy.erase_devices"

// signRecords signs and stores a record for every device the erase run
// res erased, and returns the history event that lists them. Records are
// stored before the node moves on: a failure here is retried with the
// agent's repeated report (record ids derive from the run and device).
func (c *engine) signRecords(ctx context.Context, n *store.Node, res *store.StepResult) ([]*store.Event, error) {
	if c.cfg.Records == nil || res.Step != eraseStep || len(res.Result) == 0 {
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
		c.log.Error("reading erase_devices result for sanitization records failed", "node", n.UUID, "err", err)
		return []*store.Event{c.newEvent(n.UUID, "WARNING", "cleaning", "no sanitization records: "+err.Error())}, nil
	}
	if len(recs) == 0 {
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
	return []*store.Event{c.newEvent(n.UUID, "INFO", "cleaning", what+": "+strings.Join(parts, "; "))}, nil
}

func orNone(s string) string {
	if s == "" {
		return "none reported"
	}
	return s
}
