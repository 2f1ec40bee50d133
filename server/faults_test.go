package server

import (
	"reflect"
	"strings"
	"testing"
)

// TestConfigHasNoTestFaults: no exported field of Config is a test fault
// (those are set only by this package's tests, or by SetTestFaults in a
// build with the tag leaseplane_testfaults).
func TestConfigHasNoTestFaults(t *testing.T) {
	ty := reflect.TypeFor[Config]()
	for i := range ty.NumField() {
		f := ty.Field(i)
		if f.IsExported() && (strings.Contains(f.Name, "Fault") || f.Name == "DrillNames" || f.Name == "DisableAlarms") {
			t.Errorf("Config.%s is a test fault in the product's Config", f.Name)
		}
	}
}
