package apiserver

import (
	"net/http/pprof"

	"github.com/gorilla/mux"
)

// installProfiling serves net/http/pprof's handlers where kube-apiserver
// does, so `go tool pprof https://…/debug/pprof/profile` works with the
// admin credential.
func installProfiling(router *mux.Router) {
	router.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	router.HandleFunc("/debug/pprof/profile", pprof.Profile)
	router.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	router.HandleFunc("/debug/pprof/trace", pprof.Trace)
	router.PathPrefix("/debug/pprof/").HandlerFunc(pprof.Index)
}
