package classify

// BedrockStatus classifies a Bedrock Runtime error answer by its status and
// the exception it names (X-Amzn-ErrorType, or __type in the body; the
// names are aws-sdk-go-v2's service/bedrockruntime types). Bedrock answers
// some exceptions that are a verdict on the channel with a status whose
// generic meaning is final: 400 ServiceQuotaExceededException (the quota
// of the channel's AWS account: another channel's account may have room)
// and 424 ModelErrorException ("The model returned an error. Try your
// request again."). Those are Retryable, as are the exceptions whose status
// already reads so (429 ThrottlingException and ModelNotReadyException,
// 408 ModelTimeoutException, 500 InternalServerException, 503
// ServiceUnavailableException). Any other exception (400
// ValidationException, 404 ResourceNotFoundException, …) or none keeps
// the status's class: a genuine client error stays final. An exception
// only ever turns final into retryable, never the other way.
func BedrockStatus(status int, exception string) Class {
	c := Status(status)
	if c != Final {
		return c
	}
	switch exception {
	case "ServiceQuotaExceededException", "ModelErrorException", "ModelStreamErrorException",
		"ThrottlingException", "ModelNotReadyException", "ModelTimeoutException",
		"InternalServerException", "ServiceUnavailableException":
		return Retryable
	}
	return c
}
