package ike

import "testing"

// TestNotifyNames checks the names logs and errors give the notify types
// of today's features (MOBIKE RFC 4555 section 4.2, EAP-only RFC 5998,
// IKE_INTERMEDIATE RFC 9242, RFC 9370, configuration payloads RFC 7296
// section 3.10.1), not "notify N".
func TestNotifyNames(t *testing.T) {
	for typ, want := range map[NotifyType]string{
		InternalAddressFailure:        "INTERNAL_ADDRESS_FAILURE",
		FailedCPRequired:              "FAILED_CP_REQUIRED",
		UnacceptableAddresses:         "UNACCEPTABLE_ADDRESSES",
		UnexpectedNATDetected:         "UNEXPECTED_NAT_DETECTED",
		AdditionalIP4Address:          "ADDITIONAL_IP4_ADDRESS",
		AdditionalIP6Address:          "ADDITIONAL_IP6_ADDRESS",
		NoAdditionalAddresses:         "NO_ADDITIONAL_ADDRESSES",
		UpdateSAAddresses:             "UPDATE_SA_ADDRESSES",
		Cookie2:                       "COOKIE2",
		NoNATsAllowed:                 "NO_NATS_ALLOWED",
		16417:                         "EAP_ONLY_AUTHENTICATION",
		IntermediateExchangeSupported: "INTERMEDIATE_EXCHANGE_SUPPORTED",
		AdditionalKeyExchange:         "ADDITIONAL_KEY_EXCHANGE",
		InvalidMajorVersion:           "INVALID_MAJOR_VERSION",
		SinglePairRequired:            "SINGLE_PAIR_REQUIRED",
		InvalidSelectors:              "INVALID_SELECTORS",
		IPCompSupported:               "IPCOMP_SUPPORTED",
		NoProposalChosen:              "NO_PROPOSAL_CHOSEN",
		SignatureHashAlgorithms:       "SIGNATURE_HASH_ALGORITHMS",
	} {
		if got := notifyName(typ); got != want {
			t.Errorf("notifyName(%d) = %q, want %q", uint16(typ), got, want)
		}
	}
	if got := notifyName(12345); got != "notify 12345" {
		t.Errorf("notifyName(12345) = %q", got)
	}
}
