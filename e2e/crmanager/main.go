// Command crmanager is the controller the controller-runtime e2e test
// (e2e/controllerruntime_test.go) runs against Concord: a controller-runtime
// manager with its cache, leader election on a Lease, health probes and an
// events.k8s.io recorder, reconciling Widgets (widgets.e2e.concord.dev/v1)
// into owned ConfigMaps. It logs JSON lines the test reads: "became leader"
// and one "reconciled" per reconcile.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

var groupVersion = schema.GroupVersion{Group: "e2e.concord.dev", Version: "v1"}

// Widget is the custom resource: spec.data is copied into the ConfigMap
// status.configMapName names; status.reconciles counts the generations
// whose status was written, so a test can tell a generation handled twice.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

type WidgetSpec struct {
	Data map[string]string `json:"data,omitempty"`
}

type WidgetStatus struct {
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	ConfigMapName      string `json:"configMapName,omitempty"`
	Reconciles         int64  `json:"reconciles,omitempty"`
}

type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Data = maps.Clone(w.Spec.Data)
	return &out
}

func (l *WidgetList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Widget, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Widget)
	}
	return &out
}

type options struct {
	server, caFile, tokenFile string
	namespace, identity       string
	leaseName                 string
	leaseDuration             time.Duration
	renewDeadline             time.Duration
	retryPeriod               time.Duration
	probeAddr                 string
}

func main() {
	var o options
	flag.StringVar(&o.server, "server", "", "URL of the API server")
	flag.StringVar(&o.caFile, "ca-file", "", "CA bundle of an HTTPS server (none for plain HTTP)")
	flag.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token (reread as client-go does)")
	flag.StringVar(&o.namespace, "namespace", "", "the only namespace watched and reconciled; also the Lease's")
	flag.StringVar(&o.identity, "identity", "", "leader election identity (the Lease's holderIdentity)")
	flag.StringVar(&o.leaseName, "lease-name", "widget-controller", "name of the leader election Lease")
	flag.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "leader election lease duration")
	flag.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "leader election renew deadline")
	flag.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "leader election retry period")
	flag.StringVar(&o.probeAddr, "health-probe-address", "", "host:port of /healthz and /readyz")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("identity", o.identity)
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	if err := run(ctrl.SetupSignalHandler(), o, log); err != nil {
		log.Error("crmanager failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	if o.server == "" || o.tokenFile == "" || o.namespace == "" || o.identity == "" || o.probeAddr == "" {
		return fmt.Errorf("--server, --token-file, --namespace, --identity and --health-probe-address are required")
	}
	cfg := &rest.Config{Host: o.server, BearerTokenFile: o.tokenFile, TLSClientConfig: rest.TLSClientConfig{CAFile: o.caFile}}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	scheme.AddKnownTypes(groupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(scheme, groupVersion)

	// controller-runtime's own lock names its holder hostname_<uuid>; this
	// one takes the identity the test looks for in the Lease. As
	// controller-runtime does, a hung request must not outlast half the
	// renew deadline.
	lockCfg := rest.CopyConfig(cfg)
	lockCfg.Timeout = max(o.renewDeadline/2, time.Second)
	leases, err := coordinationv1client.NewForConfig(rest.AddUserAgent(lockCfg, "leader-election"))
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.namespace, Name: o.leaseName},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// One namespace: the authorization policy grants no more.
		Cache:                               cache.Options{DefaultNamespaces: map[string]cache.Config{o.namespace: {}}},
		LeaderElection:                      true,
		LeaderElectionID:                    o.leaseName,
		LeaderElectionNamespace:             o.namespace,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &o.leaseDuration,
		RenewDeadline:                       &o.renewDeadline,
		RetryPeriod:                         &o.retryPeriod,
		HealthProbeBindAddress:              o.probeAddr,
		Metrics:                             metricsserver.Options{BindAddress: "0"}, // none: it would listen on :8080
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	r := &widgetReconciler{
		Client:   mgr.GetClient(),
		scheme:   scheme,
		recorder: mgr.GetEventRecorder("widget-controller"),
		identity: o.identity,
		log:      log,
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&Widget{}).Owns(&corev1.ConfigMap{}).Complete(r); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	go func() {
		select {
		case <-mgr.Elected():
			log.Info("became leader", "lease", o.namespace+"/"+o.leaseName)
		case <-ctx.Done():
		}
	}()
	log.Info("starting manager", "server", o.server)
	return mgr.Start(ctx)
}

type widgetReconciler struct {
	client.Client
	scheme   *runtime.Scheme
	recorder recorder.EventRecorder
	identity string
	log      *slog.Logger
}

// Reconcile makes the Widget's ConfigMap hold its spec.data, then records
// the generation in status and an Event, once per generation.
func (r *widgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var w Widget
	if err := r.Get(ctx, req.NamespacedName, &w); err != nil {
		// Gone: the garbage collector removes its ConfigMap.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !w.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name + "-data"}}
	op, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Data = maps.Clone(w.Spec.Data)
		return controllerutil.SetControllerReference(&w, cm, r.scheme)
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("configmap %s: %w", cm.Name, err)
	}
	statusWritten := w.Status.ObservedGeneration != w.Generation || w.Status.ConfigMapName != cm.Name
	if statusWritten {
		w.Status.ObservedGeneration = w.Generation
		w.Status.ConfigMapName = cm.Name
		w.Status.Reconciles++
		// A conflict (a newer Widget) is retried with it.
		if err := r.Status().Update(ctx, &w); err != nil {
			return ctrl.Result{}, fmt.Errorf("status: %w", err)
		}
		r.recorder.Eventf(&w, cm, corev1.EventTypeNormal, "Reconciled", "WriteConfigMap", "generation %d by %s", w.Generation, r.identity)
	}
	r.log.Info("reconciled", "name", w.Name, "generation", w.Generation, "configMap", string(op), "statusWritten", statusWritten)
	return ctrl.Result{}, nil
}
