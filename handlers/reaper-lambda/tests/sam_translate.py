"""Prints the CloudFormation that the SAM translator (installed with cfn-lint) makes of a
template, as JSON: what `sam deploy` would submit. Offline: the local CodeUri is replaced by a
placeholder S3 URI, as cfn-lint does, and no managed policy is looked up."""
import json
import os
import sys

from cfnlint.decode import cfn_yaml
from samtranslator.translator.transform import transform


class NoManagedPolicies:
    def load(self):
        return {}


os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
template = cfn_yaml.load(sys.argv[1])
for resource in template["Resources"].values():
    if resource["Type"] == "AWS::Serverless::Function":
        resource["Properties"]["CodeUri"] = "s3://placeholder/key"
print(json.dumps(transform(template, {}, NoManagedPolicies()), default=str))
