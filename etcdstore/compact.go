package etcdstore

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// compactRevKey records the last compaction round, shared by all replicas.
const compactRevKey = "compact_rev_key"

// Compactor compacts etcd's history, as kube-apiserver's compactor does:
// every round, the first replica to bump the version of a shared key records
// the current revision there and compacts to the revision recorded in the
// previous round, so history always spans at least one interval and exactly
// one replica compacts per round.
type Compactor struct {
	store  *Store
	client *clientv3.Client
	key    string
	// version is the compact key's version this replica last saw.
	version int64
	// revision is the revision recorded at the previous round: the next
	// compaction target.
	revision int64
}

// NewCompactor returns a compactor for the store's etcd.
func (s *Store) NewCompactor() *Compactor {
	return &Compactor{store: s, client: s.kv.Client, key: s.prefix + "/" + compactRevKey}
}

// Round runs one compaction round. It returns the revision compacted to, or
// 0 if this round compacted nothing (another replica won it, or it was the
// first round). The round is bounded by the store's request timeout.
func (c *Compactor) Round(ctx context.Context) (_ int64, err error) {
	ctx, end := c.store.begin(ctx, "compact", "")
	defer func() { end(err) }()
	resp, err := c.client.Txn(ctx).If(
		clientv3.Compare(clientv3.Version(c.key), "=", c.version),
	).Then(
		clientv3.OpPut(c.key, strconv.FormatInt(c.revision, 10)),
	).Else(
		clientv3.OpGet(c.key),
	).Commit()
	if err != nil {
		// The outcome may be unknown; either way c.version is left as it
		// was, so if the put was applied the next round finds the key
		// moved, follows it and compacts nothing: history is never cut
		// shorter than an interval.
		return 0, writeError("compaction round", c.key, err)
	}
	current := resp.Header.Revision
	if !resp.Succeeded {
		// Another replica ran this round; follow its count.
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			c.version = kvs[0].Version
		}
		c.revision = current
		return 0, nil
	}
	c.version++
	target := c.revision
	c.revision = current
	if target == 0 {
		return 0, nil // never compact on the first round
	}
	if _, err := c.client.Compact(ctx, target); err != nil {
		return 0, fmt.Errorf("compact to revision %d: %w", target, err)
	}
	return target, nil
}
