package controller

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/api"
)

// cachedAuth remembers for ttl the credentials that passed the (bcrypt)
// check, so that a dashboard polling the API, or a script listing pages,
// does not spend tens of milliseconds of CPU on every request. It keeps
// only a keyed hash of user and password (the key is random per process),
// never the password.
type cachedAuth struct {
	next api.Authenticator
	ttl  time.Duration
	key  []byte

	mu sync.Mutex
	ok map[[sha256.Size]byte]time.Time // credential hash -> expiry
}

// maxCachedCredentials bounds the cache; past it, expired entries go first
// and then the whole cache (only successful logins get in).
const maxCachedCredentials = 1024

func newCachedAuth(next api.Authenticator, ttl time.Duration) (*cachedAuth, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("auth cache key: %w", err)
	}
	return &cachedAuth{next: next, ttl: ttl, key: key, ok: map[[sha256.Size]byte]time.Time{}}, nil
}

// Authenticate implements api.Authenticator.
func (c *cachedAuth) Authenticate(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return c.next.Authenticate(r)
	}
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(pass))
	var sum [sha256.Size]byte
	copy(sum[:], m.Sum(nil))
	now := time.Now()
	c.mu.Lock()
	exp, hit := c.ok[sum]
	c.mu.Unlock()
	if hit && now.Before(exp) {
		return true
	}
	if !c.next.Authenticate(r) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ok) >= maxCachedCredentials {
		for k, e := range c.ok {
			if now.After(e) {
				delete(c.ok, k)
			}
		}
		if len(c.ok) >= maxCachedCredentials {
			clear(c.ok)
		}
	}
	c.ok[sum] = now.Add(c.ttl)
	return true
}

// forget empties the cache: after a reload of the htpasswd file, every
// password is checked again.
func (c *cachedAuth) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.ok)
}
