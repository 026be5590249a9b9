package agent

// identity.go gives the agent the identity it reads its assignment as.
//
// The agent's pod runs as the shared ServiceAccount sluice-agent, whose
// token (projected into the agent's containers alone, bound to the pod
// and so to its node) may do two things: create this node's Lease, and
// request a token for this node's own ServiceAccount, sluice-agent-<node>
// (v1alpha1.AgentServiceAccount), which the controller keeps with a Role
// naming this node's Lease, assignment, and the Secrets that assignment
// needs. The admission policies of deploy/base/rbac.yaml refuse both for
// any other node. NodeConfig returns the rest.Config that authenticates
// as the node's account, with a short-lived token requested again before
// it expires (or at once after the API server refuses it).

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// NodeTokenSeconds is the lifetime the agent asks for its node's token:
// the API server's minimum, so that a token taken from a node is of use
// for minutes at most.
const NodeTokenSeconds = 600

// NodeConfig returns a configuration that reaches the API server as pod
// does (its address and CA) but authenticates as gateway's own agent
// ServiceAccount in namespace, with tokens pod requests for it (the
// TokenRequest API, on pod's credentials). It asks for no token until the
// first request; a token that cannot be had (the controller has not made
// the account yet) fails that request, and the next one asks again.
func NodeConfig(pod *rest.Config, namespace, gateway string) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(pod)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	name := v1alpha1.AgentServiceAccount(gateway)
	ts := transport.NewCachedTokenSource(tokenSource(func() (*oauth2.Token, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		secs := int64(NodeTokenSeconds)
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("agent: token for ServiceAccount %s/%s: %w", namespace, name, err)
		}
		// Renewed a minute early (the cache renews 10 s before expiry).
		return &oauth2.Token{AccessToken: tr.Status.Token, TokenType: "Bearer",
			Expiry: tr.Status.ExpirationTimestamp.Add(-time.Minute)}, nil
	}))
	cfg := rest.AnonymousClientConfig(pod)
	cfg.WrapTransport = transport.ResettableTokenSourceWrapTransport(ts)
	return cfg, nil
}

// PodMapper returns a REST mapper that asks the API server with pod's
// credentials (discovery is open to every authenticated user), for the
// clients and the cache of NodeConfig's: their requests fail until the
// controller has made the node's account, which it does once the Lease
// that the agent creates with pod's exists.
func PodMapper(pod *rest.Config) (meta.RESTMapper, error) {
	hc, err := rest.HTTPClientFor(pod)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	m, err := apiutil.NewDynamicRESTMapper(pod, hc)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return m, nil
}

// tokenSource is an oauth2.TokenSource of a function.
type tokenSource func() (*oauth2.Token, error)

func (f tokenSource) Token() (*oauth2.Token, error) { return f() }
