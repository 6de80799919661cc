package store

import (
	"strings"
)

// aclCommands are the commands the Redis store sends or its scripts run:
// EVALSHA and EVAL (on NOSCRIPT) from the client; inside the scripts TIME,
// the LIST commands of the log (LLEN for Usage), the HASH commands of the
// counters and the feedback, GET and SET for a paced limit's state, PEXPIRE
// and PTTL for the TTLs, and TYPE, LRANGE and DEL for the repair of a key in
// a wrong state; INFO for the eviction check; PING for a program's check at
// start-up.
const aclCommands = "-@all +evalsha +eval +time +ping" +
	" +lindex +lrange +llen +rpush +lrem +lset +ltrim" +
	" +hget +hmget +hgetall +hset +hdel +hincrby +get +set" +
	" +pexpire +pttl +type +del +info"

// ACLRule returns the Redis ACL rules that give a user exactly what a Redis
// store with the given key prefix (DefaultPrefix unless WithPrefix) needs,
// for ACL SETUSER or an ACL file:
//
//	ACL SETUSER throttle on >password resetkeys ~throttle:* resetchannels -@all +evalsha +eval +time +ping +lindex +lrange +llen +rpush +lrem +lset +ltrim +hget +hmget +hgetall +hset +hdel +hincrby +get +set +pexpire +pttl +type +del +info
//
// The eviction check reads the policy with INFO memory where CONFIG GET is
// denied, which it is under this rule (CONFIG GET would also show other
// settings). Add +wait for WithReplicaAck, and +cluster|slots +command for
// a Cluster client (go-redis reads the slots and the command table), and
// +lpop +blpop +zadd +zrem +zscore +zcard +zrange +zremrangebyscore for a
// cap on requests in flight (Request.InFlight). AUTH and HELLO need no
// permission.
func ACLRule(prefix string) string {
	// Glob characters in the prefix are matched literally.
	escaped := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(prefix)
	return "resetkeys ~" + escaped + "* resetchannels " + aclCommands
}
