package bmc

// DriverInfoProperties describes the driver_info keys ParseDriverInfo reads
// for a hardware type, in Ironic's words where the meaning is Ironic's
// (ipmitool.py and redfish/utils.py COMMON_PROPERTIES), for GET
// /v1/drivers/{name}/properties. fake-hardware reads none, as Ironic's fake
// interfaces; an unknown hardware type has none either.
func DriverInfoProperties(hardwareType string) map[string]string {
	switch hardwareType {
	case HardwareIPMI:
		return map[string]string{
			"ipmi_address":    "IP address or hostname of the node. Required.",
			"ipmi_password":   "password. Optional.",
			"ipmi_port":       "remote IPMI RMCP port. Optional.",
			"ipmi_priv_level": "privilege level; default is ADMINISTRATOR. One of ADMINISTRATOR, OPERATOR, USER. Optional.",
			"ipmi_username":   "username; default is NULL user. Optional.",
			"ipmi_cipher_suite": "The number of a cipher suite to use. Only 3 (AES-128 with SHA1) or 17 (AES-128 with SHA256) " +
				"should ever be used; 17 is preferred. The default tries 3, then 17. Optional.",
		}
	case HardwareRedfish:
		return map[string]string{
			"redfish_address": "The URL address to the Redfish controller. It must include the authority portion of the URL. " +
				"If the scheme is missing, https is assumed. For example: https://mgmt.vendor.com. Required",
			"redfish_system_id": "The canonical path to the ComputerSystem resource that the driver will interact with. " +
				"It should include the root service, version and the unique resource path to a ComputerSystem " +
				"within the same authority as the redfish_address property. For example: /redfish/v1/Systems/1. " +
				"This property is only required if target BMC manages more than one ComputerSystem. Otherwise " +
				"the only available ComputerSystem is used.",
			"redfish_username": "User account with admin/server-profile access privilege. Although this property is not " +
				"mandatory it's highly recommended to set a username. Optional",
			"redfish_password": "User account password. Although this property is not mandatory, it's highly " +
				"recommended to set a password. Optional",
			"redfish_verify_ca": "Either a Boolean value or a path to a CA_BUNDLE file. If set to True the driver will " +
				"verify the host certificates; if False the driver will ignore verifying the SSL certificate. If it's " +
				"a path the driver will use the specified certificate. Defaults to True. Optional",
		}
	}
	return map[string]string{}
}
