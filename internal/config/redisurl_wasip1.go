package config

// checkRedisURL leaves storage.redis_url to the edge host, which checks
// the configuration with this package before it starts the module: the
// module does not link the Redis client (it refuses the "redis" backend
// when it starts).
func checkRedisURL(string) error { return nil }
