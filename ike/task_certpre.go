package ike

// What the certificates need before AUTH: N(SIGNATURE_HASH_ALGORITHMS)
// both ways in IKE_SA_INIT (RFC 7427 section 4; ikeSA.hashes keeps the
// peer's for our signature), and CERTREQ naming the CAs we trust for the
// peer's certificate (section 3.7): the responder's in IKE_SA_INIT, the
// initiator's in IKE_AUTH.

func init() {
	registerTask(IKE_SA_INIT, orderCertPre, newCertPreTask)
	registerTask(IKE_AUTH, orderCertPre, newCertReqTask)
}

type certPreTask struct{}

func newCertPreTask(*ikeSA) task { return certPreTask{} }

func (certPreTask) build(x *exchange) taskStatus {
	sa := x.sa
	x.add(signatureHashesNotify())
	if sa.initiator {
		return taskMore
	}
	if len(sa.peer.RemoteCAs) > 0 {
		x.add(certRequest(sa.peer.RemoteCAs))
	}
	return taskDone
}

func (certPreTask) process(x *exchange) taskStatus {
	x.sa.hashes = peerHashes(x.in)
	if x.sa.initiator {
		return taskDone
	}
	return taskMore
}

// certReqTask is the initiator's CERTREQ in IKE_AUTH.
type certReqTask struct{}

func newCertReqTask(sa *ikeSA) task {
	if !sa.initiator {
		return nil
	}
	return certReqTask{}
}

func (certReqTask) build(x *exchange) taskStatus {
	if len(x.sa.peer.RemoteCAs) > 0 {
		x.add(certRequest(x.sa.peer.RemoteCAs))
	}
	return taskDone
}

func (certReqTask) process(*exchange) taskStatus { return taskDone }
