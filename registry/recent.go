package registry

import (
	"sync"

	"github.com/concord-dev/concord/etcdstore"
)

// maxRecent bounds the objects each resource remembers.
const maxRecent = 10000

// recent remembers the last stored state this replica saw of recently used
// objects: from its reads, its writes and the watch fan-out. A write may
// start from it instead of reading etcd first. That is safe because every
// write is one etcd transaction guarded by the revision it started from: a
// stale entry only makes the transaction fail, and the write then reads etcd.
// Reads that answer clients never use it; they stay linearizable.
type recent struct {
	mu sync.Mutex
	m  map[string]recentEntry
}

type recentEntry struct {
	stored etcdstore.Object
	// obj is shared: never mutate it. It is nil for a state remembered from
	// a JSON read that never decoded it.
	obj Object
	// asServed: the stored value is obj as the store serves it (but for
	// resourceVersion), which a store that reads its objects with
	// Resource.ReadStored knows only of the values it wrote itself.
	asServed bool
}

func newRecent() *recent { return &recent{m: map[string]recentEntry{}} }

func (c *recent) get(key string) (recentEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return e, ok
}

// put remembers obj at stored.Revision unless a newer state is known.
func (c *recent) put(key string, stored etcdstore.Object, obj Object) {
	c.putWritten(key, stored, obj, false)
}

// putWritten is put for the state a write of the store left: asServed
// says its stored value is obj as served (recentEntry.asServed).
func (c *recent) putWritten(key string, stored etcdstore.Object, obj Object, asServed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && e.stored.Revision == stored.Revision {
		// One value per revision: what each put knows of it adds up.
		if e.obj == nil {
			e.obj = obj
		}
		e.asServed = e.asServed || asServed
		c.m[key] = e
		return
	}
	if e, ok := c.m[key]; ok && e.stored.Revision > stored.Revision {
		return
	}
	if len(c.m) >= maxRecent {
		for k := range c.m { // forget an arbitrary entry
			delete(c.m, k)
			break
		}
	}
	c.m[key] = recentEntry{stored: stored, obj: obj, asServed: asServed}
}

// drop forgets key if what is known of it is not newer than rev.
func (c *recent) drop(key string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && e.stored.Revision <= rev {
		delete(c.m, key)
	}
}
