//go:build !wasip1

package main

import (
	"context"

	"deeplink/internal/egress"
)

// getFiles fetches urls at once under the webhook egress rules, reading at
// most limit bytes of each answer.
func (s *server) getFiles(ctx context.Context, urls []string, limit int64) ([]egress.File, error) {
	w := s.cfg.Webhooks
	c, err := egress.NewClient(egress.Options{Timeout: w.Timeout.D(), AllowPrivate: w.AllowInsecureURLs, TrustedCAFile: w.TrustedCAFile})
	if err != nil {
		return nil, err
	}
	defer c.CloseIdleConnections()
	return egress.GetFiles(ctx, c, urls, limit), nil
}
