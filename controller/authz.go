package controller

// This file owns the users and policy files: loading them at start, and
// again (with the htpasswd file) on SIGHUP, when a file that fails to load
// leaves the running ones in force.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/policy"
)

// loadAuthz reads the users file and the policy file.
func loadAuthz(cfg Config) (api.Authz, error) {
	var az api.Authz
	if cfg.UsersFile != "" && cfg.Auth != "http_basic" {
		return az, errors.New("--users-file gives roles to http_basic accounts: use it with --auth http_basic")
	}
	az.Policy = policy.Default()
	if cfg.PolicyFile != "" {
		data, err := os.ReadFile(cfg.PolicyFile)
		if err != nil {
			return az, fmt.Errorf("read policy file: %w", err)
		}
		if az.Policy, err = az.Policy.Override(data); err != nil {
			return az, fmt.Errorf("%s: %w", cfg.PolicyFile, err)
		}
	}
	if cfg.UsersFile != "" {
		f, err := os.Open(cfg.UsersFile)
		if err != nil {
			return az, fmt.Errorf("open users file: %w", err)
		}
		defer f.Close()
		if az.Users, err = policy.ParseUsers(f); err != nil {
			return az, fmt.Errorf("%s: %w", cfg.UsersFile, err)
		}
	}
	return az, nil
}

// swapAuth is the htpasswd check, replaced whole when the file is
// reloaded.
type swapAuth struct{ cur atomic.Pointer[authBox] }

type authBox struct{ a api.Authenticator }

func newSwapAuth(a api.Authenticator) *swapAuth {
	s := &swapAuth{}
	s.cur.Store(&authBox{a})
	return s
}

// Authenticate implements api.Authenticator.
func (s *swapAuth) Authenticate(r *http.Request) bool { return s.cur.Load().a.Authenticate(r) }

// reloadAuthzOnHUP reloads the htpasswd (when passwords is set), users and
// policy files on each SIGHUP until ctx ends or the returned stop is
// called. All three load before any is put in force; the cache of checked
// passwords is emptied, so a removed account or changed password takes
// effect at once.
func reloadAuthzOnHUP(ctx context.Context, cfg Config, srv *api.Server, passwords *swapAuth, cached *cachedAuth, log *slog.Logger) (stop func()) {
	if passwords == nil && cfg.UsersFile == "" && cfg.PolicyFile == "" {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-hup:
				var next api.Authenticator
				var err error
				if passwords != nil {
					next, err = authenticator(cfg)
				}
				var az api.Authz
				if err == nil {
					az, err = loadAuthz(cfg)
				}
				if err != nil {
					log.Error("SIGHUP: htpasswd, users or policy file refused; the previous ones stay in force", "err", err)
					continue
				}
				if passwords != nil && next != nil {
					passwords.cur.Store(&authBox{next})
				}
				if cached != nil {
					cached.forget()
				}
				srv.SetAuthz(az)
				users := 0
				if az.Users != nil {
					users = az.Users.Len()
				}
				log.Info("SIGHUP: htpasswd, users and policy files reloaded", "users", users, "policy_file", cfg.PolicyFile)
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}
