package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/image"
)

func TestParseSelection(t *testing.T) {
	all := image.ClassNames(image.DefaultClasses())
	tests := []struct {
		name, classes, modules string
		want                   []string
		add, remove            []string
		err                    string
	}{
		{name: "default: every class", want: all},
		{name: "remove one", classes: "-usb", want: []string{"ethernet", "storage", "virtio", "md"}},
		{name: "only some", classes: "storage,+virtio", want: []string{"storage", "virtio"}},
		{name: "modules", modules: "+ixgbevf, -mlx4_core,+zfs", want: all, add: []string{"ixgbevf", "zfs"}, remove: []string{"mlx4_core"}},
		{name: "unknown class", classes: "-sound", err: `no class "sound"`},
		{name: "module without sign", modules: "e1000e", err: "write +e1000e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := parseSelection(tt.classes, tt.modules)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, image.ClassNames(sel.Classes))
			assert.Equal(t, tt.add, sel.Add)
			assert.Equal(t, tt.remove, sel.Remove)
		})
	}
}
