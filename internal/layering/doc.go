// Package layering holds one test, of how the module's packages import each
// other: one way, cmd (top) → apiserver → registry → etcdstore (bottom).
//
// Its test lists every package (go list) and fails, naming each offending
// arrow, when a non-test import climbs (registry → apiserver), skips to
// etcdstore from above registry (apiserver → etcdstore; cmd, the
// composition root that starts etcd, may), reaches into the layers from
// internal/ (importable from anywhere, importing none of them) or from
// e2e/, docs/ and deploy/ (which test and run binaries), or when the top
// level holds anything but those folders and the module's own files.
//
// The arrows between top-level folders, with how many package imports
// each holds:
//
//	go test ./internal/layering -run TestLayers -v
package layering
