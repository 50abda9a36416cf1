package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// installResources creates, on every API target that writes a custom
// resource, the resource's CRD (once per target; an existing one is used
// as it is, one being deleted is created anew once gone) and waits until
// it is Established and its objects are served. A CRD this run created is
// deleted at the end.
func installResources(ctx context.Context, cfg Config, targets []*target, p *progress) error {
	done := map[string]bool{}
	for _, t := range targets {
		key := t.spec.Name + "/" + t.res.Name
		if !t.res.Custom || t.api == nil || done[key] {
			continue
		}
		done[key] = true
		name := t.res.crdName()
		label := fmt.Sprintf("setup target=%s: CRD %s", t.spec.Name, name)
		start := time.Now()
		p.status(label, nil, start)
		created, err := t.api.installCRD(ctx, name, []byte(widgetCRD))
		if err != nil {
			return fmt.Errorf("target %s: create CRD %s: %w", t.spec.Name, name, err)
		}
		how := "existed (used as it is, kept)"
		if created {
			how = "created"
			if !cfg.Keep {
				t.crds = append(t.crds, name)
			}
		}
		established, served, err := t.api.waitCRD(ctx, name, t.res, start)
		if err != nil {
			return fmt.Errorf("target %s: %w", t.spec.Name, err)
		}
		p.done(fmt.Sprintf("%s %s, Established after %s, its objects served after %s", label, how,
			established.Round(time.Millisecond), served.Round(time.Millisecond)))
	}
	return nil
}

// sizer tells how long one object is as JSON (ObjectSize).
type sizer interface {
	objectSize(ctx context.Context, ns, name string, data map[string]string) (sent, served int, err error)
}

// measureSizes creates one object of every target, as the workloads do,
// and records how long it is as JSON, sent and served.
func measureSizes(ctx context.Context, cfg Config, rep *Report, targets []*target, p *progress) error {
	for _, t := range targets {
		s, ok := t.b.(sizer)
		if !ok {
			continue
		}
		name := t.spec.Name + "-size-0"
		t.track(cfg.Namespace, name)
		pl := t.res.payloadSize(cfg.ObjectSize)
		sent, served, err := s.objectSize(ctx, cfg.Namespace, name, map[string]string{"payload": payload(pl)})
		if err != nil {
			return fmt.Errorf("target %s: object size: %w", t.label, err)
		}
		rep.Objects = append(rep.Objects, ObjectSize{Target: t.spec.Name, Resource: t.res.Name, Payload: pl, Sent: sent, Served: served})
		p.note(fmt.Sprintf("setup target=%s: a %s is %d bytes of JSON sent, %d served (payload %d bytes)", t.label, t.res.Kind, sent, served, pl))
	}
	return nil
}

// objectSize creates the object (or finds it) and reads it back.
func (b *httpBackend) objectSize(ctx context.Context, ns, name string, data map[string]string) (int, int, error) {
	body, err := json.Marshal(b.res.object(ns, name, "", data))
	if err != nil {
		return 0, 0, err
	}
	if _, err := b.create(ctx, ns, name, data); err != nil && !errors.Is(err, errExists) {
		return 0, 0, err
	}
	code, n, _, err := b.fetch(ctx, b.res.collection(ns)+"/"+url.PathEscape(name), "application/json", false)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET %s/%s: %d", ns, name, code)
	}
	return len(body), n, err
}

// objectSize of raw etcd: the value Concord would store, sent and read.
func (b *etcdBackend) objectSize(ctx context.Context, ns, name string, data map[string]string) (int, int, error) {
	if _, err := b.create(ctx, ns, name, data); err != nil && !errors.Is(err, errExists) {
		return 0, 0, err
	}
	rctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.client.Get(rctx, b.key(ns, name))
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, errNotFound
	}
	n := len(resp.Kvs[0].Value)
	return n, n, nil
}
