package pause

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestFor(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
		max  time.Duration
	}{
		{"waits the duration", context.Background(), 20 * time.Millisecond, true, time.Second},
		{"zero returns at once", context.Background(), 0, true, 10 * time.Millisecond},
		{"negative returns at once", context.Background(), -time.Second, true, 10 * time.Millisecond},
		{"cancelled context ends a long wait at once", cancelled, time.Hour, false, 100 * time.Millisecond},
		{"cancelled context with zero wait", cancelled, 0, false, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			assert.Equal(t, tt.want, For(tt.ctx, tt.d))
			took := time.Since(start)
			assert.Less(t, took, tt.max)
			if tt.want && tt.d > 0 {
				assert.GreaterOrEqual(t, took, tt.d)
			}
		})
	}
}

func TestForEndsWhenTheContextEndsMidWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	assert.False(t, For(ctx, time.Hour))
	assert.Less(t, time.Since(start), 2*time.Second)
}
