package kernel

import (
	"slices"
	"sort"
)

// nameIndex keeps the live resources in name order, so that wait answers a
// page (a prefix, a start and a limit) in time that follows the page, and
// a snapshot lists the resources without sorting them. It is a sorted list
// of short sorted chunks: insertion and removal move at most a chunk's
// worth of pointers, plus, rarely, the list of chunks itself.
type nameIndex struct {
	chunks [][]*resource
	n      int
}

const indexChunk = 256

func (x *nameIndex) len() int { return x.n }

// chunkFor is the index of the chunk where name belongs: the first whose
// last name is not below name, or the last chunk.
func (x *nameIndex) chunkFor(name string) int {
	i := sort.Search(len(x.chunks), func(i int) bool {
		c := x.chunks[i]
		return c[len(c)-1].name >= name
	})
	if i == len(x.chunks) && i > 0 {
		i--
	}
	return i
}

func posIn(c []*resource, name string) int {
	return sort.Search(len(c), func(j int) bool { return c[j].name >= name })
}

// insert adds res, whose name must not be in the index.
func (x *nameIndex) insert(res *resource) {
	x.n++
	if len(x.chunks) == 0 {
		x.chunks = append(x.chunks, []*resource{res})
		return
	}
	i := x.chunkFor(res.name)
	c := x.chunks[i]
	c = slices.Insert(c, posIn(c, res.name), res)
	if len(c) <= indexChunk {
		x.chunks[i] = c
		return
	}
	// Split a full chunk in two halves (copies, so neither aliases the other).
	half := len(c) / 2
	lo := append(make([]*resource, 0, indexChunk), c[:half]...)
	hi := append(make([]*resource, 0, indexChunk), c[half:]...)
	x.chunks[i] = lo
	x.chunks = slices.Insert(x.chunks, i+1, hi)
}

// remove drops res from the index.
func (x *nameIndex) remove(res *resource) {
	if len(x.chunks) == 0 {
		return
	}
	i := x.chunkFor(res.name)
	c := x.chunks[i]
	j := posIn(c, res.name)
	if j == len(c) || c[j] != res {
		return
	}
	x.n--
	c = slices.Delete(c, j, j+1)
	if len(c) == 0 {
		x.chunks = slices.Delete(x.chunks, i, i+1)
		return
	}
	x.chunks[i] = c
}

// from calls f with each resource whose name is at least start, in name
// order, until f returns false.
func (x *nameIndex) from(start string, f func(*resource) bool) {
	if len(x.chunks) == 0 {
		return
	}
	i := x.chunkFor(start)
	j := posIn(x.chunks[i], start)
	for ; i < len(x.chunks); i, j = i+1, 0 {
		for _, res := range x.chunks[i][j:] {
			if !f(res) {
				return
			}
		}
	}
}
