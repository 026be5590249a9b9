package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxHANameLen is the longest member or group name the gateway's [ha]
// takes (config.MaxHANameLen; the agent's tests check they agree).
const MaxHANameLen = 32

// HAMemberName is the name a gateway has in [ha] (its member name, and its
// group's): the gateway's name when it is one [ha] takes (1 to 32 of
// a-z, 0-9 and '-'), else a name made from it and a hash of it, the same
// on every node. The agent renders it into [ha]; the controller issues
// the member's sync-channel certificate for it (the partner's [ha]
// peer_name checks it).
func HAMemberName(gateway string) string {
	valid := len(gateway) > 0 && len(gateway) <= MaxHANameLen && gateway[0] != '-'
	for i := 0; valid && i < len(gateway); i++ {
		c := gateway[i]
		valid = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if valid {
		return gateway
	}
	sum := sha256.Sum256([]byte(gateway))
	h := hex.EncodeToString(sum[:4])
	var b strings.Builder
	for _, r := range strings.ToLower(gateway) {
		if b.Len() >= MaxHANameLen-len(h)-1 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else if b.Len() > 0 {
			b.WriteByte('-')
		}
	}
	return strings.TrimRight(b.String(), "-") + "-" + h
}

// AgentServiceAccountPrefix is the prefix of the ServiceAccount a
// gateway's node agent reads its assignment as: the controller keeps
// AgentServiceAccountPrefix+g, with a Role naming only what gateway g's
// assignment needs, and the agent's pod (ServiceAccount
// AgentPodServiceAccount) may request a token for that one account alone:
// deploy/base/rbac.yaml's admission policy compares the name with the
// node the pod's own token is bound to.
const AgentServiceAccountPrefix = "sluice-agent-"

// AgentPodServiceAccount is the ServiceAccount the agent's pods run as,
// in the pool's namespace. Its rights are to create its node's Lease and
// to request a token for its node's agent account (AgentServiceAccount),
// both held to its node by admission policy.
const AgentPodServiceAccount = "sluice-agent"

// MaxGatewayNameLen is the longest gateway (node) name the fleet gives an
// identity to: AgentServiceAccountPrefix plus the name must be a
// DNS subdomain of at most 253 characters.
const MaxGatewayNameLen = 253 - len(AgentServiceAccountPrefix)

// AgentServiceAccount returns the name of the ServiceAccount gateway's
// node agent reads its assignment as (and the name of its Role and
// RoleBinding).
func AgentServiceAccount(gateway string) string { return AgentServiceAccountPrefix + gateway }
