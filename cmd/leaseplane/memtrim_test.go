package main

import "testing"

func TestTrimmerTrimsOncePerBurst(t *testing.T) {
	const mb = 1 << 20
	tests := []struct {
		name    string
		samples []uint64 // cumulative bytes allocated
		trims   []bool   // whether each sample trims
	}{
		{"idle server never trims", []uint64{10 * mb, 10 * mb, 10 * mb}, []bool{false, false, false}},
		{"small work never trims", []uint64{0, 5 * mb, 5 * mb, 10 * mb, 10 * mb}, []bool{false, false, false, false, false}},
		{"no trim while the burst goes on", []uint64{0, 40 * mb, 80 * mb, 120 * mb}, []bool{false, false, false, false}},
		{"trim once when the burst ends", []uint64{0, 40 * mb, 80 * mb, 80 * mb, 80 * mb}, []bool{false, false, false, true, false}},
		{"a second burst trims again", []uint64{0, 70 * mb, 70 * mb, 140 * mb, 140 * mb}, []bool{false, false, true, false, true}},
		{"a counter that goes back starts over", []uint64{0, 70 * mb, 5 * mb, 5 * mb}, []bool{false, false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr trimmer
			for i, s := range tt.samples {
				if got := tr.observe(s); got != tt.trims[i] {
					t.Errorf("sample %d (%d MB): trim %v, want %v", i, s/mb, got, tt.trims[i])
				}
			}
		})
	}
}

// TestServeGC: serve sets its own GOGC only when the environment sets
// none.
func TestServeGC(t *testing.T) {
	if p, ok := serveGC(""); !ok || p != serveGCPercent {
		t.Errorf("without GOGC: %d, %v; want %d", p, ok, serveGCPercent)
	}
	for _, env := range []string{"100", "off", "50"} {
		if p, ok := serveGC(env); ok {
			t.Errorf("GOGC=%s: serve sets %d", env, p)
		}
	}
}
