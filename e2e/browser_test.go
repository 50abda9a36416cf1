package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
)

// chromiumPath is Debian's Chromium; CI installs it.
const chromiumPath = "/usr/bin/chromium"

// Bounds of the browser test.
const (
	browserTestTimeout = 90 * time.Second
	pageResultTimeout  = 20 * time.Second
)

// corsPage is served from an origin of its own. It talks to the API at
// http://127.0.0.1:<api> as a browser app would, and leaves what it saw in
// window.results. With mode=edit it reads flags, saves it with If-Match and
// then saves again with the now stale tag; with mode=delete it deletes flags
// with If-Match "<stale>".
const corsPage = `<!doctype html>
<meta charset="utf-8">
<title>concord CORS page</title>
<pre id="out">running</pre>
<script>
const params = new URLSearchParams(location.search);
const url = "http://127.0.0.1:" + params.get("api") + "/api/v1/namespaces/default/configmaps/flags";
const r = {errors: []};

async function edit() {
  let got;
  try {
    got = await fetch(url);
  } catch (e) {
    r.errors.push("GET blocked: " + e.name);
    return;
  }
  r.getStatus = got.status;
  r.etag = got.headers.get("ETag");
  const obj = await got.json();
  if (r.etag === null) {
    r.errors.push("GET: the ETag header is not visible to the script");
    return;
  }
  obj.data.mode = "green";
  delete obj.metadata.resourceVersion;
  const body = JSON.stringify(obj);
  const put = (tag) => fetch(url, {
    method: "PUT",
    headers: {"Content-Type": "application/json", "If-Match": tag},
    body: body,
  });
  try {
    const res = await put(r.etag);
    r.putStatus = res.status;
    r.newEtag = res.headers.get("ETag");
    await res.text();
  } catch (e) {
    r.errors.push("PUT blocked: " + e.name);
    return;
  }
  try {
    const res = await put(r.etag);
    r.stalePutStatus = res.status;
    r.staleReason = (await res.json()).reason;
  } catch (e) {
    r.errors.push("stale PUT: " + e.name + ": " + e.message);
  }
}

async function del() {
  try {
    const res = await fetch(url, {method: "DELETE", headers: {"If-Match": '"' + params.get("stale") + '"'}});
    r.deleteStatus = res.status;
    r.deleteReason = (await res.json()).reason;
  } catch (e) {
    r.errors.push("DELETE blocked: " + e.name);
  }
}

(async () => {
  try {
    await (params.get("mode") === "delete" ? del() : edit());
  } catch (e) {
    r.errors.push("page: " + e.name + ": " + e.message);
  }
  document.getElementById("out").textContent = JSON.stringify(r, null, 1);
  window.results = r;
})();
</script>
`

// pageResults is window.results.
type pageResults struct {
	GetStatus      int      `json:"getStatus"`
	ETag           *string  `json:"etag"`
	PutStatus      int      `json:"putStatus"`
	NewETag        *string  `json:"newEtag"`
	StalePutStatus int      `json:"stalePutStatus"`
	StaleReason    string   `json:"staleReason"`
	DeleteStatus   int      `json:"deleteStatus"`
	DeleteReason   string   `json:"deleteReason"`
	Errors         []string `json:"errors"`
}

func (r *pageResults) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func TestBrowserEditsWithIfMatchAcrossOrigins(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("this test drives headless Chromium at %s: %v; install it with: apt-get install -y chromium", chromiumPath, err)
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), browserTestTimeout)
	defer cancel()

	pages := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/page.html" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprint(w, corsPage)
	}))
	defer pages.Close()
	origin := pages.URL // the page's origin, http://127.0.0.1:<port>
	if !loopbackURL.MatchString(origin) {
		t.Fatalf("page server URL = %q; want http://127.0.0.1:<port>", origin)
	}

	etcd := etcdtest.Start(t)
	allowed := startConcord(t, "concord A (CORS for the page)", t.TempDir(),
		"--etcd-servers", etcd.Endpoint, "--cors-allowed-origins", "^"+regexp.QuoteMeta(origin)+"$")

	created := doConfigMap(t, http.MethodPost, configMapsURL(allowed.url),
		newConfigMap("flags", map[string]string{"mode": "blue"}), http.StatusCreated)
	rv1 := created.ResourceVersion
	if rv1 == "" {
		t.Fatal("POST flags: no resourceVersion")
	}

	browser := newBrowser(t, ctx)

	// Allowed origin: read, save with If-Match, save again with the stale tag.
	res := loadPage(t, browser, origin, allowed, "mode=edit")
	if len(res.Errors) > 0 {
		t.Errorf("page on A: errors %q; want none (results %s)", res.Errors, res)
	}
	if res.GetStatus != http.StatusOK {
		t.Errorf("page on A: GET status %d; want 200", res.GetStatus)
	}
	if res.ETag == nil || *res.ETag != `"`+rv1+`"` {
		t.Fatalf("page on A: ETag as the script sees it = %s; want %q (results %s)", quoteOrNull(res.ETag), `"`+rv1+`"`, res)
	}
	if res.PutStatus != http.StatusOK {
		t.Errorf("page on A: PUT with If-Match %s: status %d; want 200", *res.ETag, res.PutStatus)
	}
	rv2, ok := unquoteETag(res.NewETag)
	if !ok || rv2 == rv1 {
		t.Fatalf("page on A: ETag of the PUT answer = %s; want a quoted resourceVersion other than %q (results %s)", quoteOrNull(res.NewETag), rv1, res)
	}
	if res.StalePutStatus != http.StatusPreconditionFailed || res.StaleReason != "PreconditionFailed" {
		t.Errorf("page on A: PUT with the stale If-Match %s: status %d, reason %q; want 412, \"PreconditionFailed\"",
			*res.ETag, res.StalePutStatus, res.StaleReason)
	}
	requireFlags(t, allowed, "green", rv2, "after the page's edit")
	// Both writes carried If-Match, which no request may carry unpreflighted
	// (the browser may reuse one preflight for both).
	if n := countRequests(allowed, http.MethodOptions, http.StatusNoContent); n < 1 {
		t.Errorf("concord A logged %d preflights (OPTIONS, 204) from the browser; want at least 1", n)
	}
	if n := countRequests(allowed, http.MethodPut, 0); n != 2 {
		t.Errorf("concord A logged %d PUTs from the browser; want 2 (the save and the stale save)", n)
	}

	// Allowed origin: a preflighted DELETE with a stale If-Match fails and
	// deletes nothing.
	res = loadPage(t, browser, origin, allowed, "mode=delete&stale="+rv1)
	if len(res.Errors) > 0 {
		t.Errorf("page on A: DELETE errors %q; want none (results %s)", res.Errors, res)
	}
	if res.DeleteStatus != http.StatusPreconditionFailed || res.DeleteReason != "PreconditionFailed" {
		t.Errorf("page on A: DELETE with the stale If-Match \"%s\": status %d, reason %q; want 412, \"PreconditionFailed\"",
			rv1, res.DeleteStatus, res.DeleteReason)
	}
	// The browser may answer the DELETE's preflight from its cache, so
	// only the DELETE itself is counted.
	if n := countRequests(allowed, http.MethodDelete, http.StatusPreconditionFailed); n != 1 {
		t.Errorf("concord A logged %d DELETEs answered 412 from the browser; want 1", n)
	}
	requireFlags(t, allowed, "green", rv2, "after the page's stale DELETE")

	// Origins that are not allowed: the browser hides the answer from the
	// page, which then writes nothing.
	blocked := []struct {
		name string
		args []string
	}{
		{"concord B (no CORS)", nil},
		{"concord C (CORS for another origin)", []string{"--cors-allowed-origins", "^" + regexp.QuoteMeta(strings.Replace(origin, "127.0.0.1", "localhost", 1)) + "$"}},
	}
	for _, b := range blocked {
		p := startConcord(t, b.name, t.TempDir(), append([]string{"--etcd-servers", etcd.Endpoint}, b.args...)...)
		// The server does serve this origin's requests; it just must not
		// say that the browser may show them to the page.
		h := originHeaders(t, configMapURL(p.url, "flags"), origin)
		if h.code != http.StatusOK || h.allowOrigin != "" {
			t.Errorf("%s: GET with Origin %s: code %d, Access-Control-Allow-Origin %q; want 200 and none", b.name, origin, h.code, h.allowOrigin)
		}
		res := loadPage(t, browser, origin, p, "mode=edit")
		if res.GetStatus != 0 || res.ETag != nil || res.PutStatus != 0 || res.StalePutStatus != 0 {
			t.Errorf("page on %s: results %s; want the GET blocked and nothing else", b.name, res)
		}
		if want := []string{"GET blocked: TypeError"}; !slices.Equal(res.Errors, want) {
			t.Errorf("page on %s: errors %q; want %q", b.name, res.Errors, want)
		}
		if n := countRequests(p, http.MethodPut, 0); n != 0 {
			t.Errorf("%s logged %d PUTs from the browser; want none", b.name, n)
		}
		if n := countRequests(p, http.MethodOptions, 0); n != 0 {
			t.Errorf("%s logged %d OPTIONS from the browser; want none", b.name, n)
		}
		requireFlags(t, p, "green", rv2, "after the blocked page on "+b.name)
	}
}

// browserLog keeps what chromedp and Chromium say, for a failed test only.
type browserLog struct{ syncbuf.Buffer }

func (l *browserLog) printf(format string, args ...any) {
	fmt.Fprintf(l, format+"\n", args...)
}

// withoutDBus is the log without the lines about the missing D-Bus, which
// a container has none of and which say nothing about the test.
func (l *browserLog) withoutDBus() string {
	var keep []string
	for _, line := range strings.Split(l.String(), "\n") {
		if !strings.Contains(line, "dbus") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// newBrowser starts headless Chromium, bound by ctx, with the flags a closed
// network needs. It is stopped at the end of the test.
func newBrowser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	out := &browserLog{}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(out),
	)
	browser, cancelBrowser := chromedp.NewContext(allocCtx,
		chromedp.WithLogf(out.printf), chromedp.WithErrorf(out.printf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium log (without its D-Bus complaints):\n%s", out.withoutDBus())
		}
	})
	// The first Run starts the browser and ties it to browser's lifetime.
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return browser
}

// loadPage opens the page on its origin, pointed at the API of p, and waits
// for window.results.
func loadPage(t *testing.T, browser context.Context, origin string, p *proc, query string) *pageResults {
	t.Helper()
	m := loopbackURL.FindStringSubmatch(p.url)
	if m == nil {
		t.Fatalf("%s: url %q; want http://127.0.0.1:<port>", p.name, p.url)
	}
	pageURL := origin + "/page.html?api=" + m[1] + "&" + query
	ctx, cancel := context.WithTimeout(browser, pageResultTimeout+5*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("navigate to %s: %v", pageURL, err)
	}
	res, err := chromedp.Run(ctx, chromedp.Poll[*pageResults]("window.results",
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(pageResultTimeout)))
	if err != nil {
		out, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("out").textContent`))
		t.Fatalf("%s: window.results: %v; the page shows %q", pageURL, err, out)
	}
	if res == nil {
		t.Fatalf("%s: window.results is null", pageURL)
	}
	return res
}

// requireFlags checks the stored flags through plain HTTP.
func requireFlags(t *testing.T, p *proc, mode, rv, when string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, configMapURL(p.url, "flags"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET flags %s: %v", when, err)
	}
	defer resp.Body.Close()
	var cm corev1.ConfigMap
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET flags through %s %s: code %d; want 200", p.name, when, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&cm); err != nil {
		t.Fatalf("GET flags through %s %s: decode: %v", p.name, when, err)
	}
	if cm.Data["mode"] != mode || cm.ResourceVersion != rv {
		t.Errorf("GET flags through %s %s: data.mode %q at resourceVersion %q; want %q at %q", p.name, when, cm.Data["mode"], cm.ResourceVersion, mode, rv)
	}
	if got := resp.Header.Get("ETag"); got != `"`+cm.ResourceVersion+`"` {
		t.Errorf("GET flags through %s %s: ETag %q; want %q", p.name, when, got, `"`+cm.ResourceVersion+`"`)
	}
}

type corsAnswer struct {
	code        int
	allowOrigin string
}

// originHeaders sends a GET with an Origin header, as a browser would.
func originHeaders(t *testing.T, url, origin string) corsAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s with Origin %s: %v", url, origin, err)
	}
	resp.Body.Close()
	return corsAnswer{code: resp.StatusCode, allowOrigin: resp.Header.Get("Access-Control-Allow-Origin")}
}

// countRequests counts the browser's requests with method (and code, unless
// 0) in the request log of p.
func countRequests(p *proc, method string, code int) int {
	n := 0
	for _, line := range strings.Split(p.log(), "\n") {
		var l struct {
			Msg       string `json:"msg"`
			Verb      string `json:"verb"`
			Code      int    `json:"code"`
			UserAgent string `json:"userAgent"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "request" || !strings.Contains(l.UserAgent, "Chrome") {
			continue
		}
		if l.Verb == method && (code == 0 || l.Code == code) {
			n++
		}
	}
	return n
}

// unquoteETag returns the opaque part of a strong entity tag.
func unquoteETag(tag *string) (string, bool) {
	if tag == nil || len(*tag) < 3 || !strings.HasPrefix(*tag, `"`) || !strings.HasSuffix(*tag, `"`) {
		return "", false
	}
	return (*tag)[1 : len(*tag)-1], true
}

func quoteOrNull(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}
