//go:build !wasip1

package config

import (
	"errors"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// checkRedisURL reports whether u, storage.redis_url, is one the Redis
// client can connect by, in its own parser's words. The error never
// holds the URL, whose userinfo may be a password. (The edge module
// leaves this to its host: see redisurl_wasip1.go.)
func checkRedisURL(u string) error {
	_, err := redis.ParseURL(u)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "redis: "))
	}
	return nil
}
