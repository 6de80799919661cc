// Package clusterslot computes Redis Cluster hash slots, as the Redis Cluster
// specification defines them: CRC16 (XMODEM) of the key's hash tag, modulo
// 16384.
package clusterslot

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// HashTag returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the next "}" when it is not empty, else key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Of returns the hash slot of key.
func Of(key string) int { return int(crc16(HashTag(key)) % Slots) }

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
