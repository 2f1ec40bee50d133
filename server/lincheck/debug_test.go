package lincheck

import (
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/anishathalye/porcupine"
)

// dumpIllegal writes the first partition (resource) that is not
// linearizable to a file, in call order, and logs the operation that ends
// its shortest failing prefix: where to start reading.
func dumpIllegal(t *testing.T, ops []porcupine.Operation) {
	m := model()
	for _, part := range m.Partition(ops) {
		if porcupine.CheckOperations(m, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		f, err := os.CreateTemp("", "lincheck-illegal-*.txt")
		if err != nil {
			return
		}
		defer f.Close()
		fmt.Fprintln(f, "# call ms, return ms, client, operation -> output")
		for _, o := range part {
			fmt.Fprintf(f, "%d %d c%d %s\n", o.Call/1e6, o.Return/1e6, o.ClientId, m.DescribeOperation(o.Input, o.Output))
		}
		for n := 1; n <= len(part); n++ {
			if !porcupine.CheckOperations(m, part[:n]) {
				t.Logf("the history of %s first fails at its operation %d: %s (all of it: %s)",
					part[0].Input.(input).resource, n, m.DescribeOperation(part[n-1].Input, part[n-1].Output), f.Name())
				break
			}
		}
		return
	}
}
