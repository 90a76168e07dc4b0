// Package pause waits for a duration unless a context ends first. Every
// retry and poll loop of ours needs exactly this; five copies of it had
// grown, two of them with time.After, whose timer outlives a cancelled
// wait.
package pause

import (
	"context"
	"time"
)

// For waits d and reports true, or reports false as soon as ctx is done.
// A d of zero or less returns at once (true unless ctx is already done).
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
