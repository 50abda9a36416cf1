package app

import (
	"flag"
	"log/slog"
	"strconv"
)

// kubeOnlyFlags are kube-apiserver flags that have no meaning in Concord:
// they configure what it does not have (Pods, Services, admission plugins).
// They are accepted, so that tools which start kube-apiserver (envtest) can
// start Concord with the same command line, and each one given is logged
// as ignored at start-up. Any other unknown flag is still an error.
var kubeOnlyFlags = []struct {
	name, why string
	boolean   bool
}{
	{name: "allow-privileged", boolean: true, why: "there are no Pods, so no privileged containers"},
	{name: "service-cluster-ip-range", why: "there are no Services to give cluster IPs"},
	{name: "service-node-port-range", why: "there are no Services to give node ports"},
	{name: "advertise-address", why: "there is no kubernetes Service whose endpoints would name it"},
	{name: "enable-admission-plugins", why: "Concord's admission is fixed and always on: NamespaceLifecycle (no creates in a terminating or missing namespace), MutatingAdmissionPolicy, MutatingAdmissionWebhook, ValidatingAdmissionPolicy and ValidatingAdmissionWebhook, in kube's order"},
	{name: "disable-admission-plugins", why: "Concord's admission plugins cannot be turned off"},
}

// ignoredFlag is one kube-only flag given on the command line.
type ignoredFlag struct{ name, value, why string }

// addKubeFlags binds kube-apiserver's names of Concord's own flags, and the
// kube-only flags.
func (cfg *Config) addKubeFlags(fs *flag.FlagSet) {
	fs.IntVar(&cfg.Port, "secure-port", cfg.Port, "kube-apiserver's name of --port")
	for _, f := range kubeOnlyFlags {
		note := func(v string) error {
			cfg.IgnoredFlags = append(cfg.IgnoredFlags, ignoredFlag{name: f.name, value: v, why: f.why})
			return nil
		}
		usage := "kube-apiserver's flag, accepted and ignored: " + f.why
		if f.boolean {
			fs.BoolFunc(f.name, usage, func(v string) error {
				if _, err := strconv.ParseBool(v); err != nil {
					return err
				}
				return note(v)
			})
			continue
		}
		fs.Func(f.name, usage, note)
	}
}

// logIgnoredFlags says, one line each, which kube-only flags were given.
func (cfg *Config) logIgnoredFlags(log *slog.Logger) {
	for _, f := range cfg.IgnoredFlags {
		log.Info("kube-apiserver flag ignored: it has no meaning in Concord", "flag", "--"+f.name, "value", f.value, "why", f.why)
	}
}
