package bearer

import "testing"

func TestKey(t *testing.T) {
	for _, c := range []struct {
		header, key string
		ok          bool
	}{
		{"", "", true},
		{"Bearer lp_a_b", "lp_a_b", true},
		{"bearer  lp_a_b ", "lp_a_b", true},
		{"Basic Zm9v", "", false},
		{"Bearer", "", false},
		{"Bearer   ", "", false},
	} {
		key, ok := Key(c.header)
		if key != c.key || ok != c.ok {
			t.Errorf("Key(%q) = %q, %v; want %q, %v", c.header, key, ok, c.key, c.ok)
		}
	}
}
