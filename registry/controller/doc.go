// Package controller is the toolkit Concord's controllers are written
// with, so that each controller is its own logic only:
//
//   - Watch keeps a watch of a registry store open: every object present
//     when the watch opens, the end of those (Synced), then every change and
//     bookmark, opened again from the current state when it ends (a 410, an
//     etcd restart, the store's watch cache being rebuilt), until ctx ends.
//   - Queue is client-go's typed rate-limited work queue with its workers:
//     an item queued twice is worked on once, never by two workers at once,
//     and one not done is tried again after a back-off.
//   - Starting and stopping a controller on one replica at a time, under a
//     Lease, is package leaderelect's Elector.
package controller
