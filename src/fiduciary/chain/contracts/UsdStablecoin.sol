// SPDX-License-Identifier: MIT
// A 6-decimal USD stablecoin for dev chains: OpenZeppelin's ERC20 (abstract in v5) with the
// decimals of USDC and a mint for its deployer. Nothing here but what OZ's ERC20 lacks.
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";

contract UsdStablecoin is ERC20, Ownable {
    constructor(string memory name_, string memory symbol_) ERC20(name_, symbol_) Ownable(msg.sender) {}

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function mint(address to, uint256 amount) external onlyOwner {
        _mint(to, amount);
    }
}
